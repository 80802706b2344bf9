#include "ops/plan_run.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/error.h"

namespace cerar {

PlanRun::PlanRun(const Plan& plan, Transport& transport, std::byte* data, size_t elementBytes,
                 size_t segmentElements, size_t windowBytes, void* const* send,
                 void* const* recv, SegmentCodec& codec, InBandVerdict* verdict,
                 bool postInStep)
    : plan_(plan), link_(transport, windowBytes), data_(data), elementBytes_(elementBytes),
      encoded_(codec.messageElementBytes() != 0), segment_(segmentElements), send_(send),
      recv_(recv), codec_(codec), verdict_(verdict), lead_(postInStep ? 0 : 1) {
  CERAR_ENFORCE(segment_ % codec_.blockElements() == 0, "a segment of ", segment_,
                " elements is not whole blocks of ", codec_.blockElements());
  if (verdict_ != nullptr) {
    // Rounds 1..N-1 are loop 0 of CERAR: they read the buffer and write only the message
    // buffers; round N (the homes' first finish) is the first to write the buffer.
    CERAR_ENFORCE(plan_.N > 1 && plan_.numRounds() > plan_.N && plan_.rounds[0].action ==
                      Action::kSendGradient && plan_.rounds[plan_.N - 1].action ==
                      Action::kFinishFirst,
                  "an in-band verdict needs a CERAR plan with c > N > 1");
    flagRounds_ = plan_.N - 1;
    verdict_->flags.assign(2 * plan_.N, 0);
  }
}

bool PlanRun::execute(RunStats& stats) {
  const int L = plan_.numRounds();
  const int decide = flagRounds_ + 1;  // with a verdict, the step that reads it: N
  if (lead_ == 1) postReceives(1);
  for (int t = 1; t <= L + 1; ++t) {
    const Round* round = t <= L ? &plan_.rounds[t - 1] : nullptr;
    const size_t sendSegments = round ? segments(round->message) : 0;
    const size_t arrivedSegments = t > 1 ? segments(plan_.rounds[t - 2].receive) : 0;
    // The receives posted in step t: round t + lead_'s. With a verdict, round N's wait for it
    // (step N), so that a stop leaves none.
    const int posted = t + lead_;
    const size_t postedSegments = posted <= L && !(verdict_ && lead_ == 1 && posted == decide)
                                      ? segments(plan_.rounds[posted - 1].receive)
                                      : 0;
    if (t >= 2 && t - 1 <= flagRounds_) receiveFlag(t - 1);
    if (verdict_ && t == decide) {
      if (verdict_->any) {
        // Every rank got the same flag: all stop here, with round t-1's message in flight.
        round_ = t - 1;
        for (size_t k = 0; k < arrivedSegments; ++k) link_.waitRecv();
        waitSendsThrough(L + 1, 0);
        stats.rounds = t - 1;
        return false;
      }
      if (lead_ == 1) postReceives(t);
    }
    if (t <= flagRounds_) sendFlag(t);
    if (posted <= flagRounds_) {  // ahead of that round's receives, posted below
      round_ = posted;
      link_.postRecv(&verdict_->flags[plan_.N + posted], 1);
    }
    const size_t count = std::max({sendSegments, arrivedSegments, postedSegments});
    for (size_t k = 0; k < count; ++k) {
      if (k < arrivedSegments) {
        round_ = t - 1;  // the message of round t-1 arrives in step t
        link_.waitRecv();
      }
      // Round t's receive lands where round t-2's message was, consumed in step t-1: it may
      // go before the send. Round t+1's lands where round t-1's was: after the send used it.
      if (lead_ == 0 && k < postedSegments) postReceive(t, plan_.rounds[t - 1].receive, k);
      if (k < sendSegments) sendSegment(t, *round, k);
      if (t > L && k < arrivedSegments) storeFinal(k);
      if (lead_ == 1 && k < postedSegments) postReceive(t + 1, plan_.rounds[t].receive, k);
    }
    if (round) {
      stats.bytesSent += bytesOf(round->message);
      stats.bytesReceived += bytesOf(round->receive);
    }
  }
  waitSendsThrough(L + 1, 0);
  stats.rounds = L;
  return true;
}

// All receives of round t, its flag first (rounds 1..flagRounds_).
void PlanRun::postReceives(int t) {
  round_ = t;
  if (t <= flagRounds_) link_.postRecv(&verdict_->flags[plan_.N + t], 1);
  const size_t elements = plan_.rounds[t - 1].receive;
  for (size_t k = 0; k < segments(elements); ++k) postReceive(t, elements, k);
}

// Round t's flag: this rank's verdict or any that arrived, ahead of round t's message. It is
// tracked as a send of segment 0 so that sends are waited for in posting order.
void PlanRun::sendFlag(int t) {
  round_ = t;
  verdict_->flags[t] = verdict_->any || verdict_->mine ? 1 : 0;
  verdict_->any = verdict_->flags[t] != 0;
  link_.postSend(&verdict_->flags[t], 1);
  pendingSends_.emplace_back(t, 0);
}

void PlanRun::receiveFlag(int t) {
  round_ = t;
  link_.waitRecv();
  if (verdict_->flags[plan_.N + t] != 0) verdict_->any = true;
}

size_t PlanRun::segmentLength(size_t elements, size_t k) const {
  return std::min(segment_, elements - k * segment_);
}

std::byte* PlanRun::at(void* base, size_t element) const {
  return static_cast<std::byte*>(base) + element * elementBytes_;
}

// Segment k of round t's message in `buffers` (send_ or recv_).
std::byte* PlanRun::messageAt(void* const* buffers, int t, size_t k) const {
  return static_cast<std::byte*>(buffers[t % 2]) + k * bytesOf(segment_);
}

// Segment k of round t's send buffer, once the send of round t-2 from there is done.
std::byte* PlanRun::reuseSendBuffer(int t, size_t k) {
  waitSendsThrough(t - 2, k);
  return messageAt(send_, t, k);
}

std::byte* PlanRun::out(const Range& range, size_t k) const {
  return at(data_, range.offset + k * segment_);
}

// Where the message of round t is stored unchanged, if it is: the next round forwards it or
// it is the last one. Such a message is received straight into the result (no copy); the
// slice there is no longer needed, since the message causally follows this rank's own last
// use of it around the ring. An encoded message is never the data's bytes.
const Range* PlanRun::storedUnchanged(int t) const {
  if (encoded_) return nullptr;
  const int L = plan_.numRounds();
  const Range* range = nullptr;
  if (t == L) range = plan_.accumulateFinal ? nullptr : &plan_.finalStore;
  else if (plan_.rounds[t].action == Action::kStoreAndForward) range = &plan_.rounds[t].store;
  return range && range->length == plan_.rounds[t - 1].receive ? range : nullptr;
}

// y: what arrived in the previous round, same segment.
std::byte* PlanRun::arrived(int t, size_t k) const {
  if (const Range* range = storedUnchanged(t - 1)) return out(*range, k);
  return messageAt(recv_, t - 1, k);
}

void PlanRun::postReceive(int t, size_t elements, size_t k) {
  round_ = t;
  std::byte* to = messageAt(recv_, t, k);
  if (const Range* range = storedUnchanged(t)) to = out(*range, k);
  link_.postRecv(to, bytesOf(segmentLength(elements, k)));
}

// Sends complete in posting order; wait for those up to and including (t, k).
void PlanRun::waitSendsThrough(int t, size_t k) {
  while (!pendingSends_.empty() && pendingSends_.front() <= std::make_pair(t, k)) {
    round_ = pendingSends_.front().first;
    pendingSends_.pop_front();
    link_.waitSend();
  }
}

void PlanRun::sendSegment(int t, const Round& round, size_t k) {
  round_ = t;
  const size_t n = segmentLength(round.message, k);
  const std::byte* y = arrived(t, k);
  const std::byte* source = nullptr;
  switch (round.action) {
    case Action::kSendGradient:
      source = out(round.grad, k);  // zero-copy: the slice is not written before it arrives
      if (encoded_) {
        std::byte* message = reuseSendBuffer(t, k);
        codec_.encode(source, message, n);
        source = message;
      }
      break;
    case Action::kAccumulate: {
      std::byte* message = reuseSendBuffer(t, k);
      codec_.accumulate(y, out(round.grad, k), message, n);
      source = message;
      break;
    }
    case Action::kFinishFirst:
      codec_.finishFirst(y, out(round.store, k), n);
      source = out(round.store, k);
      if (encoded_) {
        // The owner keeps the value it sends, as every other rank decodes it.
        std::byte* message = reuseSendBuffer(t, k);
        codec_.encode(source, message, n);
        codec_.store(message, out(round.store, k), n);
        source = message;
      }
      break;
    case Action::kFinishDecode:
      codec_.finishDecode(y, out(round.previous, k), out(round.store, k), n);
      source = out(round.store, k);
      break;
    case Action::kStoreAndEncode: {
      std::byte* message = reuseSendBuffer(t, k);
      const size_t gradStart = std::min(round.grad.length, k * segment_);
      const size_t gradLength = std::min(n, round.grad.length - gradStart);
      codec_.storeAndEncode(y, out(round.grad, k), gradLength, out(round.store, k), message, n);
      source = message;
      break;
    }
    case Action::kStoreAndForward:
      if (y != out(round.store, k)) codec_.store(y, out(round.store, k), n);
      source = out(round.store, k);
      if (encoded_) {
        // The same bits go on, from the send buffer: the receive buffer is reused by the next
        // round's receive before this send need be done.
        std::byte* message = reuseSendBuffer(t, k);
        std::memcpy(message, y, bytesOf(n));
        source = message;
      }
      break;
  }
  round_ = t;  // after waitSendsThrough, which may have named an older round
  link_.postSend(source, bytesOf(n));
  pendingSends_.emplace_back(t, k);
}

void PlanRun::storeFinal(size_t k) {
  const Range& range = plan_.finalStore;
  const std::byte* y = arrived(plan_.numRounds() + 1, k);
  const size_t n = segmentLength(range.length, k);
  if (plan_.accumulateFinal) {
    codec_.finishFirst(y, out(range, k), n);  // out = y + g, in place
  } else if (y != out(range, k)) {
    codec_.store(y, out(range, k), n);
  }
}

namespace {

// Without a window, a long message may go in segments of up to pacing.longSegmentBytes, at
// least kSegmentsPerShare per rank's share of the data, so that rounds still overlap (one
// segment in flight while the other is reduced, as Gloo's ring): fewer transfers, each with
// its own cost in the transport (Gloo's TCP pairs trade two notices per transfer; 4 ranks as
// processes on loopback, 4 MiB: 11.4 ms a call in two segments per share, 14.0 in four). The
// share, not this rank's messages, sizes them: every rank must cut a transfer alike.
constexpr size_t kSegmentsPerShare = 2;

size_t freeSegmentBytes(const Pacing& pacing, size_t shareBytes) {
  if (pacing.windowBytes > 0 || pacing.longSegmentBytes <= pacing.segmentBytes)
    return pacing.segmentBytes;
  return std::clamp(shareBytes / kSegmentsPerShare, pacing.segmentBytes, pacing.longSegmentBytes);
}

// On links the CPU bounds, a round's receives are posted in its own step, each just before
// the matching send, as Gloo's ring posts them: at least two segments, not two rounds, wait
// posted. Two rounds ahead took about 2 % longer there (4 ranks in network namespaces, 4 MiB;
// docs/pacing.md, "Receives in step"). Where a queue bounds the link, in step is slower: a
// receiver's notice waits in its own queue behind its data. Short messages keep a step ahead
// too, so that a sender a step ahead never waits on a notice.
bool postInStep(const Pacing& pacing, size_t segment, size_t maxMessage) {
  return pacing.receivesInStep && pacing.windowBytes == 0 && maxMessage >= 2 * segment;
}

void checkPlanFits(const Plan& plan, const Transport& transport) {
  CERAR_ENFORCE(transport.size() == plan.N && transport.rank() == plan.rank, "plan for rank ",
                plan.rank, " of ", plan.N, " run on transport rank ", transport.rank(), " of ",
                transport.size());
}

// Adds "in round t of L" to an error, keeping its code and peer.
[[noreturn]] void rethrowInRound(const Error& e, int round, int rounds) {
  withContext(e.status(), "", detail::concat(" in round ", round, " of ", rounds)).raise();
}

}  // namespace

RunStats runPlan(const Plan& plan, Transport& transport, void* data, size_t elementBytes,
                 const Pacing& pacing, SegmentCodec& codec,
                 const std::function<RunBuffers(size_t bytes)>& prepare,
                 const std::function<void()>& finish, InBandVerdict* verdict) {
  checkPlanFits(plan, transport);
  const auto start = std::chrono::steady_clock::now();
  RunStats stats;
  if (plan.rounds.empty()) return stats;
  const size_t messageElement =
      codec.messageElementBytes() ? codec.messageElementBytes() : elementBytes;
  // Segments of whole blocks: a block's extra bytes (a scale) lie in its segment's message.
  const size_t block = codec.blockElements();
  const size_t segmentBytes = freeSegmentBytes(pacing, plan.d / size_t(plan.N) * messageElement);
  const size_t segment =
      (std::max<size_t>(1, segmentBytes / messageElement) + block - 1) / block * block;
  const size_t messageBytes = codec.messageBytes(plan.maxMessage, elementBytes);
  const RunBuffers buffers = prepare(messageBytes);
  // Every transfer of the run lies in one of these: the transport sets them up once.
  RegisteredMemory registered[] = {
      {transport, data, plan.d * elementBytes},
      {transport, buffers.send[0], messageBytes}, {transport, buffers.send[1], messageBytes},
      {transport, buffers.recv[0], messageBytes}, {transport, buffers.recv[1], messageBytes}};
  PlanRun run(plan, transport, static_cast<std::byte*>(data), elementBytes, segment,
              pacing.windowBytes, buffers.send, buffers.recv, codec, verdict,
              postInStep(pacing, segment, plan.maxMessage));
  try {
    if (run.execute(stats)) {
      if (finish) finish();
    } else {
      stats.nonFiniteFallback = true;
    }
  } catch (const Error& e) {
    rethrowInRound(e, run.round(), plan.numRounds());
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace cerar
