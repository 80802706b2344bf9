#include "ops/wire_run.h"

#include "ops/codec/int8_wire.h"
#include "common/error.h"
#include "ops/plan_run.h"

namespace cerar {

namespace {

// The exact ring's sum with encoded messages: PlanRun streams the rounds, these codecs cast.
// Messages live in the wire's buffers, never in the float32 data.
class LossyCodec : public SegmentCodec {
 public:
  LossyCodec(WireBuffers& buffers, const float* data, float* lost)
      : scratch_(buffers.scratch), decoded_(buffers.decoded), data_(data), lost_(lost) {}

  // The owner adds its own slice last, in float32 (PlanRun then encodes the sum and keeps it
  // as decoded).
  void finishFirst(const void* y, void* out, size_t n) override {
    float* sum = static_cast<float*>(out);
    if (scratch_.size() < n) scratch_.resize(n);  // a segment's: kept between runs
    store(y, scratch_.data(), n);
    for (size_t i = 0; i < n; ++i) sum[i] = scratch_[i] + sum[i];
  }
  void finishDecode(const void*, const void*, void*, size_t) override {
    refuse(Action::kFinishDecode);
  }
  void storeAndEncode(const void*, const void*, size_t, void*, void*, size_t) override {
    refuse(Action::kStoreAndEncode);
  }

 protected:
  // Error feedback: the loss of encoding x[0, n) (elements of the data) as msg.
  void keepLoss(const float* x, const void* msg, size_t n) {
    if (lost_ == nullptr) return;
    decoded_.resize(n);
    store(msg, decoded_.data(), n);
    float* loss = lost_ + (x - data_);
    for (size_t i = 0; i < n; ++i) loss[i] = x[i] - decoded_[i];
  }
  // The same for a hop's sum y's values + g, the sum computed again as the hop did.
  void keepHopLoss(const void* y, const float* g, const void* msg, size_t n) {
    if (lost_ == nullptr) return;
    decoded_.resize(n);
    store(y, decoded_.data(), n);
    float* loss = lost_ + (g - data_);
    for (size_t i = 0; i < n; ++i) loss[i] = decoded_[i] + g[i];
    store(msg, decoded_.data(), n);
    for (size_t i = 0; i < n; ++i) loss[i] -= decoded_[i];
  }

 private:
  [[noreturn]] static void refuse(Action action) {
    CERAR_ENFORCE(false, "a lossy wire runs the exact ring only, not ", actionName(action));
    __builtin_unreachable();
  }
  std::vector<float>& scratch_;  // one segment's decoded message
  std::vector<float>& decoded_;
  const float* data_;
  float* lost_;
};

class HalfCodec final : public LossyCodec {
 public:
  HalfCodec(Wire wire, WireBuffers& buffers, const float* data, float* lost)
      : LossyCodec(buffers, data, lost), wire_(wire) {}

  size_t messageElementBytes() const override { return sizeof(uint16_t); }
  void encode(const void* x, void* msg, size_t n) override {
    codec::encodeWire(wire_, static_cast<const float*>(x), static_cast<uint16_t*>(msg), n);
    keepLoss(static_cast<const float*>(x), msg, n);
  }
  void accumulate(const void* y, const void* g, void* msg, size_t n) override {
    codec::accumulateWire(wire_, static_cast<const uint16_t*>(y), static_cast<const float*>(g),
                          static_cast<uint16_t*>(msg), n);
    keepHopLoss(y, static_cast<const float*>(g), msg, n);
  }
  void store(const void* y, void* out, size_t n) override {
    codec::decodeWire(wire_, static_cast<const uint16_t*>(y), static_cast<float*>(out), n);
  }

 private:
  Wire wire_;
};

// A segment's message: its blocks' scales, then its codes (ops/codec/int8_wire.h).
class Int8Codec final : public LossyCodec {
 public:
  using LossyCodec::LossyCodec;

  size_t messageElementBytes() const override { return 1; }
  size_t messageBytes(size_t elements, size_t) const override {
    return codec::int8MessageBytes(elements);
  }
  size_t blockElements() const override { return codec::kInt8Block; }
  void encode(const void* x, void* msg, size_t n) override {
    codec::encodeInt8(static_cast<const float*>(x), static_cast<std::byte*>(msg), n);
    keepLoss(static_cast<const float*>(x), msg, n);
  }
  void accumulate(const void* y, const void* g, void* msg, size_t n) override {
    codec::accumulateInt8(static_cast<const std::byte*>(y), static_cast<const float*>(g),
                          static_cast<std::byte*>(msg), n);
    keepHopLoss(y, static_cast<const float*>(g), msg, n);
  }
  void store(const void* y, void* out, size_t n) override {
    codec::decodeInt8(static_cast<const std::byte*>(y), static_cast<float*>(out), n);
  }
};

}  // namespace

RunStats runWireRing(const Plan& plan, Transport& transport, float* data, Wire wire,
                     WireBuffers& buffers, size_t segmentBytes, size_t windowBytes, float* lost) {
  CERAR_ENFORCE(wire != Wire::kNone && !plan.accumulateFinal && plan.c == plan.N,
                "a lossy wire runs the exact ring's all-reduce only");
  CERAR_ENFORCE(segmentBytes > 0, "segment size must be positive");
  HalfCodec half(wire, buffers, data, lost);
  Int8Codec int8(buffers, data, lost);
  SegmentCodec& codec = wire == Wire::kInt8 ? static_cast<SegmentCodec&>(int8) : half;
  const Pacing pacing{segmentBytes, windowBytes};
  return runPlan(plan, transport, data, sizeof(float), pacing, codec, [&](size_t bytes) {
    for (auto* list : {buffers.send, buffers.recv})
      for (int i = 0; i < 2; ++i)
        if (list[i].size() < bytes) list[i].resize(bytes);
    return RunBuffers{{buffers.send[0].data(), buffers.send[1].data()},
                      {buffers.recv[0].data(), buffers.recv[1].data()}};
  });
}

}  // namespace cerar
