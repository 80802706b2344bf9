// Runs any plan over any transport with the CPU codec; counts rounds and bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ops/algorithms/plan.h"
#include "ops/codec/wire.h"
#include "ops/common/dtype.h"
#include "ops/transport/transport.h"

namespace cerar {

struct InBandVerdict;  // ops/plan_run.h

// Arithmetic parameters of one all-reduce.
struct CodecParams {
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double eps = 0;  // only used by CERAR's encode/decode actions
  // A 16-bit wire (ops/wire_run.h): the exact ring's sum of float32 data only.
  Wire wire = Wire::kNone;
};

struct RunStats {
  int rounds = 0;
  uint64_t bytesSent = 0;      // payload bytes sent by this rank
  uint64_t bytesReceived = 0;  // payload bytes received by this rank
  double seconds = 0;
  // CERAR was asked for, but some rank's input was non-finite or near overflow, so every rank
  // ran the exact ring (cerar-protocol.md, "Non-finite and near-overflow inputs").
  bool nonFiniteFallback = false;
  // A guarded fp16 wire (AllreduceOptions::fp16Guard) refused: every rank ran the float32 ring.
  bool wireFallback = false;
};

// How a run streams its rounds: in segments of segmentBytes, with at most about windowBytes
// in flight to the next rank (0: no window; ops/paced_link.h). Never changes a result.
struct Pacing {
  size_t segmentBytes = 256 * 1024;
  size_t windowBytes = 0;
};

// Runs a plan on one buffer over a transport: the Executor below on host memory, or the
// device executor (ops/codec/cuda) on device memory.
class PlanRunner {
 public:
  virtual ~PlanRunner() = default;
  virtual RunStats run(const Plan& plan, Transport& transport, void* data,
                       const CodecParams& params) = 0;
  // Streaming of later runs (the runtime's from the probed links); a runner may keep its own.
  virtual void setPacing(const Pacing& /*pacing*/) {}
  // Whether run() takes host memory (host-side post-passes need it).
  virtual bool hostMemory() const { return true; }
  // Whether any of the `count` elements at `data` (memory as run() takes it) is beyond
  // CERAR's range on transport.size() ranks (ops/codec/range.h). Local; sees the work ordered
  // before a run() on this transport.
  virtual bool beyondCerarRange(Transport& transport, const void* data, size_t count,
                                DType dtype);
  // Whether `mine` holds on any rank: one byte from every rank to every other, in memory as
  // run() takes it. Collective.
  virtual bool anyRank(Transport& transport, bool mine);
  // CERAR's fallback test (cerar-protocol.md, "Non-finite and near-overflow inputs"): runs
  // `plan` (CERAR, c > N > 1) unless `mine` holds on some rank; then it returns on every rank
  // with nonFiniteFallback set and the buffer untouched. Collective. This default agrees by
  // anyRank() first; the host executor carries the flag in band, ahead of the first rounds.
  virtual RunStats runUnlessAnyRank(const Plan& plan, Transport& transport, void* data,
                                    const CodecParams& params, bool mine);
};

// Streams each round in segments: segment k of round t+1 is computed and sent as soon as
// segment k of round t has arrived (cerar-protocol.md, "Performance notes").
// Thread safety: one run at a time per executor; buffers are kept between runs.
class Executor : public PlanRunner {
 public:
  static constexpr size_t kDefaultSegmentBytes = Pacing{}.segmentBytes;

  explicit Executor(size_t segmentBytes = kDefaultSegmentBytes);
  explicit Executor(const Pacing& pacing);
  void setPacing(const Pacing& pacing) override;
  ~Executor() override;

  // Runs `plan` in place on `data` (plan.d elements of params.dtype). The transport's rank and
  // size must match the plan's.
  RunStats run(const Plan& plan, Transport& transport, void* data,
               const CodecParams& params) override;
  // No exchange of its own: the flag rides ahead of the messages of rounds 1..N-1.
  RunStats runUnlessAnyRank(const Plan& plan, Transport& transport, void* data,
                            const CodecParams& params, bool mine) override;

 private:
  RunStats runHost(const Plan& plan, Transport& transport, void* data, const CodecParams& params,
                   InBandVerdict* verdict);

  Pacing pacing_;
  std::vector<std::byte> send_[2];
  std::vector<std::byte> recv_[2];
  WireBuffers wire_;
  std::unique_ptr<InBandVerdict> verdict_;
};

}  // namespace cerar
