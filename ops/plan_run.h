// One run of a plan over a transport: the round and segment bookkeeping shared by the host
// and device executors, so both post the same transfers in the same order (which is what
// makes transports and executors interchangeable bit for bit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "ops/algorithms/plan.h"
#include "ops/paced_link.h"
#include "ops/run_types.h"

namespace cerar {

// The arithmetic of a segment (cerar-protocol.md, "Schedule"); host and device implement it.
class SegmentCodec {
 public:
  virtual ~SegmentCodec() = default;
  virtual void accumulate(const void* y, const void* g, void* msg, size_t n) = 0;
  virtual void finishFirst(const void* y, void* out, size_t n) = 0;
  virtual void finishDecode(const void* y, const void* previous, void* out, size_t n) = 0;
  virtual void storeAndEncode(const void* y, const void* g, size_t gLength, void* store,
                              void* msg, size_t n) = 0;
  virtual void store(const void* y, void* out, size_t n) = 0;

  // A codec whose messages are not the data's own bytes (a lossy wire) gives
  // their element size, and encode() makes a message of data. Its messages are then never
  // sent from nor received into the data: each is encoded into the send buffer, and one that
  // a rank keeps (the finished chunk of finishFirst) is stored back from what was sent.
  virtual size_t messageElementBytes() const { return 0; }  // 0: the data's own
  virtual void encode(const void* /*x*/, void* /*msg*/, size_t /*n*/) {}
  // Bytes of a message of `elements` (`elementBytes` each in the data). A codec whose messages
  // carry something per block of elements (the int8 wire's scales) says so here and in
  // blockElements(): segments are then whole blocks (but the last), so a segment's message
  // starts at k times a full segment's bytes.
  virtual size_t messageBytes(size_t elements, size_t elementBytes) const {
    return elements * (messageElementBytes() ? messageElementBytes() : elementBytes);
  }
  virtual size_t blockElements() const { return 1; }
};

// CERAR's non-finite verdict carried in band (cerar-protocol.md, "Non-finite and near-overflow
// inputs"): `mine` is this rank's; after a run, `any` says whether some rank's was set, in which
// case the run stopped before round N with the buffer untouched. Kept by the executor: the
// transport may still write `flags` after a failed run.
struct InBandVerdict {
  bool mine = false;
  bool any = false;
  std::vector<uint8_t> flags;  // [t]: the flag sent in round t; [N + t]: the one received
};

// Streams each round in segments: segment k of round t+1 is computed and sent as soon as
// segment k of round t has arrived. `send` and `recv` are two buffers each of at least
// plan.maxMessage elements: round t sends from send[t % 2] and receives into recv[t % 2].
class PlanRun {
 public:
  PlanRun(const Plan& plan, Transport& transport, std::byte* data, size_t elementBytes,
          size_t segmentElements, size_t windowBytes, void* const* send, void* const* recv,
          SegmentCodec& codec, InBandVerdict* verdict = nullptr, bool postInStep = false);

  // Rounds t = 1..L, then a virtual round L+1 that only stores the last message received (or,
  // for a reduce-scatter, adds it to this rank's own slice). With a verdict, rounds 1..N-1 (which
  // only read the buffer) each carry one flag byte ahead of their message; returns false, having
  // drained every transfer posted, when the verdict says to stop before round N.
  bool execute(RunStats& stats);
  // The round (1..L) whose message the last transfer posted or waited for carries.
  int round() const { return round_; }

 private:
  size_t segments(size_t elements) const { return (elements + segment_ - 1) / segment_; }
  size_t bytesOf(size_t elements) const { return codec_.messageBytes(elements, elementBytes_); }
  size_t segmentLength(size_t elements, size_t k) const;
  std::byte* at(void* base, size_t element) const;
  std::byte* messageAt(void* const* buffers, int t, size_t k) const;
  std::byte* reuseSendBuffer(int t, size_t k);
  std::byte* out(const Range& range, size_t k) const;
  const Range* storedUnchanged(int t) const;
  std::byte* arrived(int t, size_t k) const;
  void postReceive(int t, size_t elements, size_t k);
  void waitSendsThrough(int t, size_t k);
  void sendSegment(int t, const Round& round, size_t k);
  void storeFinal(size_t k);
  void postReceives(int t);
  void sendFlag(int t);
  void receiveFlag(int t);

  const Plan& plan_;
  PacedLink link_;
  std::byte* data_;
  size_t elementBytes_;
  bool encoded_;  // SegmentCodec::messageElementBytes() is not 0
  size_t segment_;
  void* const* send_;
  void* const* recv_;
  SegmentCodec& codec_;
  InBandVerdict* verdict_;
  int flagRounds_ = 0;  // rounds 1..flagRounds_ carry the verdict's flag byte
  // Steps ahead of its own that a round's receives are posted: 1, or 0 (postInStep). Only
  // when, never which or in what order: every rank's sequence of transfers is the same.
  int lead_ = 1;
  std::deque<std::pair<int, size_t>> pendingSends_;
  int round_ = 0;
};

// Two send and two receive buffers for one run (PlanRun's `send` and `recv`).
struct RunBuffers {
  void* send[2];
  void* recv[2];
};

// One run as both executors make it (and the 16-bit wire's ring): checks that the plan was made
// for this transport's rank and size, skips a plan without rounds, gets buffers of at least
// `bytes` from `prepare` (segments are pacing.segmentBytes of the codec's messages),
// streams the rounds, calls `finish` after the last one, and times the run. A failure in the
// rounds or in `finish` is rethrown with "in round t of L" added, keeping its type. With a
// verdict (a CERAR plan with c > N > 1, host memory): see PlanRun::execute; a run stopped by it
// returns with nonFiniteFallback set and calls no `finish`.
RunStats runPlan(const Plan& plan, Transport& transport, void* data, size_t elementBytes,
                 const Pacing& pacing, SegmentCodec& codec,
                 const std::function<RunBuffers(size_t bytes)>& prepare,
                 const std::function<void()>& finish = {}, InBandVerdict* verdict = nullptr);

}  // namespace cerar
