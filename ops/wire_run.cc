#include "ops/wire_run.h"

#include <algorithm>
#include <chrono>

#include "ops/common/error.h"

namespace cerar {

namespace {

class WireRing {
 public:
  WireRing(const Plan& plan, Transport& transport, float* data, Wire wire, WireBuffers& b)
      : plan_(plan), transport_(transport), data_(data), wire_(wire), b_(b) {}

  // Round t: post the receive of its message, make and send this rank's, wait for both.
  void round(int t, RunStats& stats) {
    const Round& r = plan_.rounds[t - 1];
    uint16_t* incoming = b_.recv[t % 2].data();
    if (r.receive > 0) transport_.postRecv(transport_.prev(), incoming, r.receive * 2);
    const uint16_t* message = make(t, r);
    if (r.message > 0) transport_.postSend(transport_.next(), message, r.message * 2);
    if (r.receive > 0) transport_.waitRecv(transport_.prev());
    if (r.message > 0) transport_.waitSend(transport_.next());
    stats.bytesSent += r.message * 2;
    stats.bytesReceived += r.receive * 2;
  }

  // The last message received is the finished chunk at finalStore.
  void storeFinal() {
    const Range& range = plan_.finalStore;
    codec::decodeWire(wire_, arrived(plan_.numRounds() + 1), data_ + range.offset,
                      range.length);
  }

 private:
  // What arrived in round t-1.
  const uint16_t* arrived(int t) const { return b_.recv[(t - 1) % 2].data(); }

  const uint16_t* make(int t, const Round& r) {
    uint16_t* message = b_.send[t % 2].data();
    const size_t n = r.message;
    switch (r.action) {
      case Action::kSendGradient:
        codec::encodeWire(wire_, data_ + r.grad.offset, message, n);
        return message;
      case Action::kAccumulate:
        codec::accumulateWire(wire_, arrived(t), data_ + r.grad.offset, message, n);
        return message;
      case Action::kFinishFirst: {
        // The owner adds its own slice last, in float32, then keeps the value it sends, as
        // decoded by every other rank.
        float* out = data_ + r.store.offset;
        codec::decodeWire(wire_, arrived(t), b_.scratch.data(), n);
        for (size_t i = 0; i < n; ++i) out[i] = b_.scratch[i] + out[i];
        codec::encodeWire(wire_, out, message, n);
        codec::decodeWire(wire_, message, out, n);
        return message;
      }
      case Action::kStoreAndForward:
        // The same 16 bits go on; the receive buffer is not reused before the send is done.
        codec::decodeWire(wire_, arrived(t), data_ + r.store.offset, n);
        return arrived(t);
      default:
        CERAR_ENFORCE(false, "a 16-bit wire runs the exact ring only, not ",
                      actionName(r.action));
    }
    return message;
  }

  const Plan& plan_;
  Transport& transport_;
  float* data_;
  Wire wire_;
  WireBuffers& b_;
};

}  // namespace

RunStats runWireRing(const Plan& plan, Transport& transport, float* data, Wire wire,
                     WireBuffers& buffers) {
  CERAR_ENFORCE(transport.size() == plan.N && transport.rank() == plan.rank, "plan for rank ",
                plan.rank, " of ", plan.N, " run on transport rank ", transport.rank(), " of ",
                transport.size());
  CERAR_ENFORCE(wire != Wire::kNone && !plan.accumulateFinal && plan.c == plan.N,
                "a 16-bit wire runs the exact ring's all-reduce only");
  const auto start = std::chrono::steady_clock::now();
  RunStats stats;
  if (plan.rounds.empty()) return stats;
  for (auto* list : {buffers.send, buffers.recv})
    for (int i = 0; i < 2; ++i)
      if (list[i].size() < plan.maxMessage) list[i].resize(plan.maxMessage);
  if (buffers.scratch.size() < plan.maxMessage) buffers.scratch.resize(plan.maxMessage);
  WireRing ring(plan, transport, data, wire, buffers);
  const int L = plan.numRounds();
  int t = 1;
  try {
    for (; t <= L; ++t) ring.round(t, stats);
    ring.storeFinal();
  } catch (const Error& e) {
    withContext(e.status(), "", detail::concat(" in round ", std::min(t, L), " of ", L))
        .raise();
  }
  stats.rounds = L;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace cerar
