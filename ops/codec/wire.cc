#include "ops/codec/wire.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace cerar {

bool wireCarries(Wire wire, DType dtype, ReduceOp op) {
  if (wire == Wire::kNone) return true;
  return op == ReduceOp::kSum &&
         (dtype == DType::kFloat32 || (wire == Wire::kInt8 && isSixteenBitFloat(dtype)));
}

const char* wireName(Wire wire) {
  switch (wire) {
    case Wire::kNone: return "none";
    case Wire::kFloat16: return "fp16";
    case Wire::kBFloat16: return "bf16";
    case Wire::kInt8: return "int8";
  }
  return "?";
}

Wire parseWire(const std::string& name) {
  if (name == "none") return Wire::kNone;
  if (name == "fp16") return Wire::kFloat16;
  if (name == "bf16") return Wire::kBFloat16;
  if (name == "int8") return Wire::kInt8;
  CERAR_CHECK_ARGUMENT(false, "unknown wire format '", name, "' (none, fp16, bf16 or int8)");
  return Wire::kNone;
}

size_t wireElementBytes(Wire wire, size_t elementBytes) {
  return wire == Wire::kNone ? elementBytes : wire == Wire::kInt8 ? 1 : 2;
}

namespace codec {

// encodeWire, decodeWire and accumulateWire are in codec_simd.cc, beside the loops that run
// them: what parses and names wires here links without the codec's loops.

uint8_t fp16GuardBits(const float* x, size_t n, int N) {
  const float high = 32768.0f / float(N > 1 ? N : 1);
  float largest = 0;
  // std::max keeps its first argument against NaN, so NaN counts for neither bit.
  for (size_t i = 0; i < n; ++i) largest = std::max(largest, std::fabs(x[i]));
  return uint8_t((largest >= high ? 1 : 0) | (largest >= 0x1p-10f ? 2 : 0));
}

bool fp16GuardPasses(uint8_t orOverRanks) {
  return (orOverRanks & 1) == 0 && (orOverRanks & 2) != 0;
}

}  // namespace codec
}  // namespace cerar
