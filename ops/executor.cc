#include "ops/executor.h"

#include <algorithm>

#include "ops/agreement.h"
#include "ops/codec/codec.h"
#include "ops/codec/range.h"
#include "ops/codec/scale.h"
#include "common/error.h"
#include "ops/plan_run.h"
#include "ops/wire_run.h"

namespace cerar {

namespace {

// The vectorised CPU codec, bound to one all-reduce's parameters.
class HostCodec : public SegmentCodec {
 public:
  explicit HostCodec(const CodecParams& params) : p_(params) {}
  void accumulate(const void* y, const void* g, void* msg, size_t n) override {
    codec::accumulate(p_.dtype, p_.op, y, g, msg, n);
  }
  void finishFirst(const void* y, void* out, size_t n) override {
    codec::finishFirst(p_.dtype, p_.op, y, out, n);
    // While the segment is in cache, before it goes on (CodecParams::finishScale).
    if (p_.finishScale != 1.0) scaledCopy(p_.dtype, out, out, n, p_.finishScale);
  }
  void finishDecode(const void* y, const void* previous, void* out, size_t n) override {
    codec::finishDecode(p_.dtype, p_.eps, y, previous, out, n);
  }
  void storeAndEncode(const void* y, const void* g, size_t gLength, void* store, void* msg,
                      size_t n) override {
    codec::storeAndEncode(p_.dtype, p_.eps, y, g, gLength, store, msg, n);
  }
  void store(const void* y, void* out, size_t n) override { codec::store(p_.dtype, y, out, n); }

 private:
  const CodecParams& p_;
};

}  // namespace

bool PlanRunner::beyondCerarRange(Transport& transport, const void* data, size_t count,
                                  DType dtype) {
  return codec::beyondCerarRange(dtype, data, count, transport.size());
}

bool PlanRunner::anyRank(Transport& transport, bool mine) {
  return orAcrossRanks(transport, mine ? 1 : 0) != 0;
}

RunStats PlanRunner::runUnlessAnyRank(const Plan& plan, Transport& transport, void* data,
                                      const CodecParams& params, bool mine) {
  if (anyRank(transport, mine)) {
    RunStats stats;
    stats.nonFiniteFallback = true;
    return stats;
  }
  return run(plan, transport, data, params);
}

Executor::Executor(size_t segmentBytes) : Executor(Pacing{segmentBytes, 0}) {}

Executor::Executor(const Pacing& pacing) { setPacing(pacing); }

void Executor::setPacing(const Pacing& pacing) {
  CERAR_ENFORCE(pacing.segmentBytes > 0, "segment size must be positive");
  pacing_ = pacing;
}

Executor::~Executor() = default;

RunStats Executor::run(const Plan& plan, Transport& transport, void* data,
                       const CodecParams& params) {
  return runHost(plan, transport, data, params, nullptr);
}

RunStats Executor::runUnlessAnyRank(const Plan& plan, Transport& transport, void* data,
                                    const CodecParams& params, bool mine) {
  if (!verdict_) verdict_ = std::make_unique<InBandVerdict>();
  verdict_->mine = mine;
  verdict_->any = false;
  return runHost(plan, transport, data, params, verdict_.get());
}

RunStats Executor::runHost(const Plan& plan, Transport& transport, void* data,
                           const CodecParams& params, InBandVerdict* verdict) {
  CERAR_ENFORCE(params.finishScale == 1.0 || (params.wire == Wire::kNone &&
                                               plan.c == plan.N && !plan.accumulateFinal),
                "a finished slice is scaled in the exact ring's plan without a wire only");
  if (params.wire != Wire::kNone) {
    // The communicator checked wireCarries and widened 16-bit data: float32 sums here.
    CERAR_CHECK_ARGUMENT(params.dtype == DType::kFloat32 && params.op == ReduceOp::kSum,
                         "a ", wireName(params.wire), " wire sums float32 data only, got ",
                         dtypeName(params.dtype));
    // Segments of the same bytes on the wire as the float32 ring's.
    return runWireRing(plan, transport, static_cast<float*>(data), params.wire, wire_,
                       pacing_.segmentBytes, pacing_.windowBytes, params.lost);
  }
  HostCodec codec(params);
  return runPlan(plan, transport, data, dtypeSize(params.dtype), pacing_, codec,
                 [&](size_t bytes) {
                   for (auto* buffers : {send_, recv_}) {
                     for (int i = 0; i < 2; ++i)
                       if (buffers[i].size() < bytes) buffers[i].resize(bytes);
                   }
                   return RunBuffers{{send_[0].data(), send_[1].data()},
                                     {recv_[0].data(), recv_[1].data()}};
                 },
                 {}, verdict);
}

}  // namespace cerar
