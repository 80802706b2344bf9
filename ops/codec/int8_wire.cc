#include "ops/codec/int8_wire.h"

#include <cfloat>
#include <cmath>

#include "ops/codec/codec_simd.h"

namespace cerar::codec {

size_t int8MessageBytes(size_t n) {
  return (n + kInt8Block - 1) / kInt8Block * sizeof(float) + n;
}

// The loops (int8_loops.h) of the widest instruction set this CPU has (codec_simd.h).
void encodeInt8(const float* x, std::byte* msg, size_t n) { kernels().int8.encode(x, msg, n); }

void decodeInt8(const std::byte* msg, float* out, size_t n) {
  kernels().int8.decode(msg, out, n);
}

void accumulateInt8(const std::byte* y, const float* g, std::byte* out, size_t n) {
  kernels().int8.accumulate(y, g, out, n);
}

uint8_t int8GuardBits(const float* x, size_t n, int N) {
  const float high = FLT_MAX / float(N > 1 ? N : 1);
  bool risky = false;
  for (size_t i = 0; i < n; ++i) risky = risky || !(std::fabs(x[i]) < high);
  return risky ? 1 : 0;
}

}  // namespace cerar::codec
