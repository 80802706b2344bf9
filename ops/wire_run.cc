#include "ops/wire_run.h"

#include "ops/common/error.h"
#include "ops/plan_run.h"

namespace cerar {

namespace {

// The exact ring's sum with 16-bit messages: PlanRun streams the rounds, this codec casts.
// Messages live in 16-bit buffers, never in the float32 data.
class WireCodec : public SegmentCodec {
 public:
  WireCodec(Wire wire, std::vector<float>& scratch) : wire_(wire), scratch_(scratch) {}

  size_t messageElementBytes() const override { return sizeof(uint16_t); }
  void encode(const void* x, void* msg, size_t n) override {
    codec::encodeWire(wire_, static_cast<const float*>(x), static_cast<uint16_t*>(msg), n);
  }
  void accumulate(const void* y, const void* g, void* msg, size_t n) override {
    codec::accumulateWire(wire_, static_cast<const uint16_t*>(y), static_cast<const float*>(g),
                          static_cast<uint16_t*>(msg), n);
  }
  // The owner adds its own slice last, in float32 (PlanRun then encodes the sum and keeps it
  // as decoded).
  void finishFirst(const void* y, void* out, size_t n) override {
    float* sum = static_cast<float*>(out);
    codec::decodeWire(wire_, static_cast<const uint16_t*>(y), scratch_.data(), n);
    for (size_t i = 0; i < n; ++i) sum[i] = scratch_[i] + sum[i];
  }
  void store(const void* y, void* out, size_t n) override {
    codec::decodeWire(wire_, static_cast<const uint16_t*>(y), static_cast<float*>(out), n);
  }
  void finishDecode(const void*, const void*, void*, size_t) override {
    refuse(Action::kFinishDecode);
  }
  void storeAndEncode(const void*, const void*, size_t, void*, void*, size_t) override {
    refuse(Action::kStoreAndEncode);
  }

 private:
  [[noreturn]] static void refuse(Action action) {
    CERAR_ENFORCE(false, "a 16-bit wire runs the exact ring only, not ", actionName(action));
    __builtin_unreachable();
  }
  Wire wire_;
  std::vector<float>& scratch_;  // one segment's decoded message
};

}  // namespace

RunStats runWireRing(const Plan& plan, Transport& transport, float* data, Wire wire,
                     WireBuffers& buffers, size_t segmentElements, size_t windowBytes) {
  CERAR_ENFORCE(wire != Wire::kNone && !plan.accumulateFinal && plan.c == plan.N,
                "a 16-bit wire runs the exact ring's all-reduce only");
  CERAR_ENFORCE(segmentElements > 0, "segment size must be positive");
  WireCodec codec(wire, buffers.scratch);
  const Pacing pacing{segmentElements * sizeof(uint16_t), windowBytes};
  return runPlan(plan, transport, data, sizeof(float), pacing, codec, [&](size_t) {
    for (auto* list : {buffers.send, buffers.recv})
      for (int i = 0; i < 2; ++i)
        if (list[i].size() < plan.maxMessage) list[i].resize(plan.maxMessage);
    if (buffers.scratch.size() < std::min(plan.maxMessage, segmentElements))
      buffers.scratch.resize(std::min(plan.maxMessage, segmentElements));
    return RunBuffers{{buffers.send[0].data(), buffers.send[1].data()},
                      {buffers.recv[0].data(), buffers.recv[1].data()}};
  });
}

}  // namespace cerar
