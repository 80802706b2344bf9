#include "ops/codec/wire.h"

#include <algorithm>
#include <cmath>

#include "ops/codec/codec_simd.h"
#include "ops/common/error.h"

namespace cerar {

const char* wireName(Wire wire) {
  switch (wire) {
    case Wire::kNone: return "none";
    case Wire::kFloat16: return "fp16";
    case Wire::kBFloat16: return "bf16";
  }
  return "?";
}

Wire parseWire(const std::string& name) {
  if (name == "none") return Wire::kNone;
  if (name == "fp16") return Wire::kFloat16;
  if (name == "bf16") return Wire::kBFloat16;
  CERAR_CHECK_ARGUMENT(false, "unknown wire format '", name, "' (none, fp16 or bf16)");
  return Wire::kNone;
}

size_t wireElementBytes(Wire wire, size_t elementBytes) {
  return wire == Wire::kNone ? elementBytes : 2;
}

namespace codec {

namespace {

// The casts run the widest loops this CPU has (codec_simd.h).
const WireKernels& wireKernels(Wire wire) {
  return wire == Wire::kFloat16 ? kernels().fp16 : kernels().bf16;
}

void checkWire(Wire wire) {
  CERAR_ENFORCE(wire == Wire::kFloat16 || wire == Wire::kBFloat16, "no 16-bit wire: ",
                wireName(wire));
}

}  // namespace

void encodeWire(Wire wire, const float* x, uint16_t* out, size_t n) {
  checkWire(wire);
  wireKernels(wire).encode(x, out, n);
}

void decodeWire(Wire wire, const uint16_t* in, float* out, size_t n) {
  checkWire(wire);
  wireKernels(wire).decode(in, out, n);
}

void accumulateWire(Wire wire, const uint16_t* y, const float* g, uint16_t* out, size_t n) {
  checkWire(wire);
  wireKernels(wire).accumulate(y, g, out, n);
}

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
