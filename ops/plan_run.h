// One run of a plan over a transport: the round and segment bookkeeping shared by the host
// and device executors, so both post the same transfers in the same order (which is what
// makes transports and executors interchangeable bit for bit).
#pragma once

#include <cstddef>
#include <deque>
#include <utility>

#include "ops/algorithms/plan.h"
#include "ops/executor.h"

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
};

// Streams each round in segments: segment k of round t+1 is computed and sent as soon as
// segment k of round t has arrived. `send` and `recv` are two buffers each of at least
// plan.maxMessage elements: round t sends from send[t % 2] and receives into recv[t % 2].
class PlanRun {
 public:
  PlanRun(const Plan& plan, Transport& transport, std::byte* data, size_t elementBytes,
          size_t segmentElements, void* const* send, void* const* recv, SegmentCodec& codec);

  // Rounds t = 1..L, then a virtual round L+1 that only stores the last message received.
  void execute(RunStats& stats);
  // The round in progress (for error messages).
  int round() const { return round_; }

 private:
  size_t segments(size_t elements) const { return (elements + segment_ - 1) / segment_; }
  size_t segmentLength(size_t elements, size_t k) const;
  std::byte* at(void* base, size_t element) const;
  std::byte* out(const Range& range, size_t k) const;
  const Range* storedUnchanged(int t) const;
  std::byte* arrived(int t, size_t k) const;
  void postReceive(int t, size_t elements, size_t k);
  void waitSendsThrough(int t, size_t k);
  void sendSegment(int t, const Round& round, size_t k);
  void storeFinal(size_t k);

  const Plan& plan_;
  Transport& transport_;
  std::byte* data_;
  size_t elementBytes_;
  size_t segment_;
  void* const* send_;
  void* const* recv_;
  SegmentCodec& codec_;
  std::deque<std::pair<int, size_t>> pendingSends_;
  int round_ = 0;
};

// Throws unless the plan was made for this transport's rank and size.
void checkPlanFits(const Plan& plan, const Transport& transport);

// Adds "in round t of L" to a transport error, keeping its type.
[[noreturn]] void rethrowInRound(int round, int rounds);

}  // namespace cerar
