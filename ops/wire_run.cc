#include "ops/wire_run.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>

#include "ops/common/error.h"
#include "ops/paced_link.h"

namespace cerar {

namespace {

// Streams the rounds in segments as PlanRun does for the float32 ring: segment k of round t+1
// is decoded, added, encoded and sent as soon as segment k of round t has arrived, so the
// casts overlap the transfers. Messages live in 16-bit buffers, never in the float32 data.
class WireRing {
 public:
  WireRing(const Plan& plan, Transport& transport, float* data, Wire wire, size_t segment,
           size_t windowBytes, WireBuffers& b)
      : plan_(plan), link_(transport, windowBytes), data_(data), wire_(wire), segment_(segment),
        b_(b) {}

  void execute(RunStats& stats) {
    const int L = plan_.numRounds();
    round_ = 1;
    for (size_t k = 0; k < segments(plan_.rounds[0].receive); ++k)
      postReceive(1, plan_.rounds[0].receive, k);
    for (int t = 1; t <= L + 1; ++t) {
      const Round* r = t <= L ? &plan_.rounds[t - 1] : nullptr;
      const size_t sendSegments = r ? segments(r->message) : 0;
      const size_t arrivedSegments = t > 1 ? segments(plan_.rounds[t - 2].receive) : 0;
      const size_t nextSegments = t < L ? segments(plan_.rounds[t].receive) : 0;
      const size_t count = std::max({sendSegments, arrivedSegments, nextSegments});
      for (size_t k = 0; k < count; ++k) {
        if (k < arrivedSegments) {
          round_ = t - 1;  // the message of round t-1 arrives in step t
          link_.waitRecv();
        }
        if (k < sendSegments) sendSegment(t, *r, k);
        if (t > L && k < arrivedSegments) storeFinal(k);
        // Round t+1's receive reuses round t-1's buffer, consumed above.
        if (k < nextSegments) {
          round_ = t + 1;
          postReceive(t + 1, plan_.rounds[t].receive, k);
        }
      }
      if (r) {
        stats.bytesSent += r->message * 2;
        stats.bytesReceived += r->receive * 2;
      }
    }
    waitSendsThrough(L + 1, 0);
  }

  int round() const { return round_; }

 private:
  size_t segments(size_t n) const { return (n + segment_ - 1) / segment_; }
  size_t length(size_t n, size_t k) const { return std::min(segment_, n - k * segment_); }
  // Segment k of what arrived in round t-1.
  const uint16_t* arrived(int t, size_t k) const {
    return b_.recv[(t - 1) % 2].data() + k * segment_;
  }

  void postReceive(int t, size_t n, size_t k) {
    link_.postRecv(b_.recv[t % 2].data() + k * segment_, length(n, k) * 2);
  }

  // Sends complete in posting order; wait for those up to and including (t, k).
  void waitSendsThrough(int t, size_t k) {
    while (!pending_.empty() && pending_.front() <= std::make_pair(t, k)) {
      round_ = pending_.front().first;
      pending_.pop_front();
      link_.waitSend();
    }
  }

  void sendSegment(int t, const Round& r, size_t k) {
    const size_t n = length(r.message, k);
    waitSendsThrough(t - 2, k);  // the send buffer's segment of round t-2 is reused
    round_ = t;
    uint16_t* message = b_.send[t % 2].data() + k * segment_;
    const uint16_t* y = arrived(t, k);
    const size_t at = k * segment_;
    switch (r.action) {
      case Action::kSendGradient:
        codec::encodeWire(wire_, data_ + r.grad.offset + at, message, n);
        break;
      case Action::kAccumulate:
        codec::accumulateWire(wire_, y, data_ + r.grad.offset + at, message, n);
        break;
      case Action::kFinishFirst: {
        // The owner adds its own slice last, in float32, then keeps the value it sends, as
        // decoded by every other rank.
        float* out = data_ + r.store.offset + at;
        float* scratch = b_.scratch.data() + at;
        codec::decodeWire(wire_, y, scratch, n);
        for (size_t i = 0; i < n; ++i) out[i] = scratch[i] + out[i];
        codec::encodeWire(wire_, out, message, n);
        codec::decodeWire(wire_, message, out, n);
        break;
      }
      case Action::kStoreAndForward:
        // The same 16 bits go on, from the send buffer: the receive buffer is reused by the
        // next round's receive before this send need be done.
        codec::decodeWire(wire_, y, data_ + r.store.offset + at, n);
        std::memcpy(message, y, n * 2);
        break;
      default:
        CERAR_ENFORCE(false, "a 16-bit wire runs the exact ring only, not ",
                      actionName(r.action));
    }
    link_.postSend(message, n * 2);
    pending_.emplace_back(t, k);
  }

  // The last message received is the finished chunk at finalStore.
  void storeFinal(size_t k) {
    const Range& range = plan_.finalStore;
    const size_t n = length(range.length, k);
    codec::decodeWire(wire_, arrived(plan_.numRounds() + 1, k), data_ + range.offset + k * segment_,
                      n);
  }

  const Plan& plan_;
  PacedLink link_;
  float* data_;
  Wire wire_;
  size_t segment_;
  WireBuffers& b_;
  std::deque<std::pair<int, size_t>> pending_;
  int round_ = 0;
};

}  // namespace

RunStats runWireRing(const Plan& plan, Transport& transport, float* data, Wire wire,
                     WireBuffers& buffers, size_t segmentElements, size_t windowBytes) {
  CERAR_ENFORCE(transport.size() == plan.N && transport.rank() == plan.rank, "plan for rank ",
                plan.rank, " of ", plan.N, " run on transport rank ", transport.rank(), " of ",
                transport.size());
  CERAR_ENFORCE(wire != Wire::kNone && !plan.accumulateFinal && plan.c == plan.N,
                "a 16-bit wire runs the exact ring's all-reduce only");
  CERAR_ENFORCE(segmentElements > 0, "segment size must be positive");
  const auto start = std::chrono::steady_clock::now();
  RunStats stats;
  if (plan.rounds.empty()) return stats;
  for (auto* list : {buffers.send, buffers.recv})
    for (int i = 0; i < 2; ++i)
      if (list[i].size() < plan.maxMessage) list[i].resize(plan.maxMessage);
  if (buffers.scratch.size() < plan.maxMessage) buffers.scratch.resize(plan.maxMessage);
  WireRing ring(plan, transport, data, wire, segmentElements, windowBytes, buffers);
  try {
    ring.execute(stats);
  } catch (const Error& e) {
    withContext(e.status(), "",
                detail::concat(" in round ", std::min(ring.round(), plan.numRounds()), " of ",
                               plan.numRounds()))
        .raise();
  }
  stats.rounds = plan.numRounds();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace cerar
