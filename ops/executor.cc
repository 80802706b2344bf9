#include "ops/executor.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <utility>

#include "ops/codec/codec.h"
#include "ops/common/error.h"

namespace cerar {

namespace {

// One run of a plan: segment bookkeeping and the codec calls, in posting order.
class PlanRun {
 public:
  PlanRun(const Plan& plan, Transport& transport, std::byte* data, const CodecParams& params,
          size_t segmentElements, std::vector<std::byte>* send, std::vector<std::byte>* recv)
      : plan_(plan), transport_(transport), data_(data), params_(params),
        elementBytes_(dtypeSize(params.dtype)), segment_(segmentElements), send_(send),
        recv_(recv) {}

  // Round t = 1..L, then a virtual round L+1 that only stores the last message received.
  void execute(RunStats& stats) {
    const int L = plan_.numRounds();
    for (size_t k = 0; k < segments(plan_.rounds[0].receive); ++k)
      postReceive(1, plan_.rounds[0].receive, k);
    for (int t = 1; t <= L + 1; ++t) {
      round_ = t;
      const Round* round = t <= L ? &plan_.rounds[t - 1] : nullptr;
      const size_t sendSegments = round ? segments(round->message) : 0;
      const size_t arrivedSegments = t > 1 ? segments(plan_.rounds[t - 2].receive) : 0;
      const size_t nextSegments = t < L ? segments(plan_.rounds[t].receive) : 0;
      const size_t count = std::max({sendSegments, arrivedSegments, nextSegments});
      for (size_t k = 0; k < count; ++k) {
        if (k < arrivedSegments) transport_.waitRecv(transport_.prev());
        if (k < sendSegments) sendSegment(t, *round, k);
        if (t > L && k < arrivedSegments) storeFinal(k);
        // The receive of round t+1 lands where round t-1's message was, consumed above.
        if (k < nextSegments) postReceive(t + 1, plan_.rounds[t].receive, k);
      }
      if (round) {
        stats.bytesSent += round->message * elementBytes_;
        stats.bytesReceived += round->receive * elementBytes_;
      }
    }
    waitSendsThrough(L + 1, 0);
    stats.rounds = L;
  }

  int round() const { return round_; }

 private:
  size_t segments(size_t elements) const { return (elements + segment_ - 1) / segment_; }
  size_t segmentLength(size_t elements, size_t k) const {
    return std::min(segment_, elements - k * segment_);
  }
  std::byte* at(std::byte* base, size_t element) const { return base + element * elementBytes_; }
  std::byte* out(const Range& range, size_t k) const {
    return at(data_, range.offset + k * segment_);
  }
  // y: what arrived in the previous round, same segment.
  std::byte* arrived(int t, size_t k) const { return at(recv_[(t - 1) % 2].data(), k * segment_); }

  void postReceive(int t, size_t elements, size_t k) {
    transport_.postRecv(transport_.prev(), at(recv_[t % 2].data(), k * segment_),
                        segmentLength(elements, k) * elementBytes_);
  }

  // Sends complete in posting order; wait for those up to and including (t, k).
  void waitSendsThrough(int t, size_t k) {
    while (!pendingSends_.empty() && pendingSends_.front() <= std::make_pair(t, k)) {
      pendingSends_.pop_front();
      transport_.waitSend(transport_.next());
    }
  }

  void sendSegment(int t, const Round& round, size_t k) {
    const size_t n = segmentLength(round.message, k);
    const std::byte* y = arrived(t, k);
    std::byte* message = at(send_[t % 2].data(), k * segment_);
    const std::byte* source = message;
    const DType dtype = params_.dtype;
    switch (round.action) {
      case Action::kSendGradient:
        source = out(round.grad, k);  // zero-copy: the slice is not written before it arrives
        break;
      case Action::kAccumulate:
        waitSendsThrough(t - 2, k);  // the send buffer segment of round t-2 is reused
        codec::accumulate(dtype, params_.op, y, out(round.grad, k), message, n);
        break;
      case Action::kFinishFirst:
        codec::finishFirst(dtype, params_.op, y, out(round.store, k), n);
        source = out(round.store, k);
        break;
      case Action::kFinishDecode:
        codec::finishDecode(dtype, params_.eps, y, out(round.previous, k), out(round.store, k),
                            n);
        source = out(round.store, k);
        break;
      case Action::kStoreAndEncode: {
        waitSendsThrough(t - 2, k);
        const size_t gradStart = std::min(round.grad.length, k * segment_);
        const size_t gradLength = std::min(n, round.grad.length - gradStart);
        codec::storeAndEncode(dtype, params_.eps, y, out(round.grad, k), gradLength,
                              out(round.store, k), message, n);
        break;
      }
      case Action::kStoreAndForward:
        codec::store(dtype, y, out(round.store, k), n);
        source = out(round.store, k);
        break;
    }
    transport_.postSend(transport_.next(), source, n * elementBytes_);
    pendingSends_.emplace_back(t, k);
  }

  void storeFinal(size_t k) {
    const Range& range = plan_.finalStore;
    codec::store(params_.dtype, arrived(plan_.numRounds() + 1, k), out(range, k),
                 segmentLength(range.length, k));
  }

  const Plan& plan_;
  Transport& transport_;
  std::byte* data_;
  const CodecParams& params_;
  size_t elementBytes_;
  size_t segment_;
  std::vector<std::byte>* send_;
  std::vector<std::byte>* recv_;
  std::deque<std::pair<int, size_t>> pendingSends_;
  int round_ = 0;
};

}  // namespace

Executor::Executor(size_t segmentBytes) : segmentBytes_(segmentBytes) {
  CERAR_ENFORCE(segmentBytes > 0, "segment size must be positive");
}

RunStats Executor::run(const Plan& plan, Transport& transport, void* data,
                       const CodecParams& params) {
  CERAR_ENFORCE(transport.size() == plan.N && transport.rank() == plan.rank, "plan for rank ",
                plan.rank, " of ", plan.N, " run on transport rank ", transport.rank(), " of ",
                transport.size());
  const auto start = std::chrono::steady_clock::now();
  RunStats stats;
  if (plan.rounds.empty()) return stats;
  const size_t elementBytes = dtypeSize(params.dtype);
  const size_t bufferBytes = plan.maxMessage * elementBytes;
  for (auto* buffers : {send_, recv_}) {
    for (int i = 0; i < 2; ++i)
      if (buffers[i].size() < bufferBytes) buffers[i].resize(bufferBytes);
  }
  const size_t segmentElements = std::max<size_t>(1, segmentBytes_ / elementBytes);
  PlanRun run(plan, transport, static_cast<std::byte*>(data), params, segmentElements, send_,
              recv_);
  try {
    run.execute(stats);
  } catch (const TimeoutError& e) {
    throw TimeoutError(detail::concat(e.what(), " in round ", run.round(), " of ",
                                      plan.numRounds()),
                       e.peer());
  } catch (const Error& e) {
    throw Error(detail::concat(e.what(), " in round ", run.round(), " of ", plan.numRounds()));
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace cerar
