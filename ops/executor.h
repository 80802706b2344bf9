// Runs any plan over any transport with the CPU codec; counts rounds and bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ops/algorithms/plan.h"
#include "ops/codec/wire.h"
#include "common/dtype.h"
#include "ops/run_types.h"
#include "ops/transport/transport.h"

namespace cerar {

struct InBandVerdict;  // ops/plan_run.h

// Runs a plan on one buffer over a transport: the Executor below on host memory, or the
// device executor (ops/device_executor.h) on device memory.
class PlanRunner {
 public:
  virtual ~PlanRunner() = default;
  virtual RunStats run(const Plan& plan, Transport& transport, void* data,
                       const CodecParams& params) = 0;
  // Streaming of later runs (the runtime's from the probed links); a runner may keep its own.
  virtual void setPacing(const Pacing& /*pacing*/) {}
  // Whether run() takes host memory (host-side post-passes need it).
  virtual bool hostMemory() const { return true; }
  // Whether run() honours CodecParams::finishScale (else it must be 1).
  virtual bool scalesFinishedSlices() const { return false; }
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
  // The exact ring's plan without a wire: its finished slices are the sum.
  bool scalesFinishedSlices() const override { return true; }

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
