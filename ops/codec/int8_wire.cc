#include "ops/codec/int8_wire.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

namespace cerar::codec {
namespace {

size_t blocks(size_t n) { return (n + kInt8Block - 1) / kInt8Block; }

float scaleAt(const std::byte* msg, size_t block) {
  float scale;
  std::memcpy(&scale, msg + block * sizeof(float), sizeof(float));
  return scale;
}

const int8_t* codesOf(const std::byte* msg, size_t n) {
  return reinterpret_cast<const int8_t*>(msg + blocks(n) * sizeof(float));
}

// One block of m <= kInt8Block elements: its scale, then its codes.
void encodeBlock(const float* x, size_t m, float* scale, int8_t* codes) {
  float largest = 0;
  bool finite = true;
  for (size_t i = 0; i < m; ++i) {
    finite = finite && std::isfinite(x[i]);
    largest = std::max(largest, std::fabs(x[i]));
  }
  if (!finite) {
    *scale = std::numeric_limits<float>::quiet_NaN();
    std::memset(codes, 0, m);
    return;
  }
  *scale = largest / 127.0f;
  if (*scale == 0) {  // all zero, or all below 127 * 2^-149 (left as 0: an error below 2^-142)
    std::memset(codes, 0, m);
    return;
  }
  const float s = *scale;
  for (size_t i = 0; i < m; ++i) {
    // x / s <= 127 (1 + 2^-23): the clamp only catches that last ulp.
    const float q = std::nearbyint(x[i] / s);
    codes[i] = int8_t(std::clamp(q, -127.0f, 127.0f));
  }
}

}  // namespace

size_t int8MessageBytes(size_t n) { return blocks(n) * sizeof(float) + n; }

void encodeInt8(const float* x, std::byte* msg, size_t n) {
  int8_t* codes = reinterpret_cast<int8_t*>(msg + blocks(n) * sizeof(float));
  for (size_t b = 0; b * kInt8Block < n; ++b) {
    const size_t at = b * kInt8Block, m = std::min(kInt8Block, n - at);
    float scale;
    encodeBlock(x + at, m, &scale, codes + at);
    std::memcpy(msg + b * sizeof(float), &scale, sizeof(float));
  }
}

void decodeInt8(const std::byte* msg, float* out, size_t n) {
  const int8_t* codes = codesOf(msg, n);
  for (size_t b = 0; b * kInt8Block < n; ++b) {
    const size_t at = b * kInt8Block, m = std::min(kInt8Block, n - at);
    const float scale = scaleAt(msg, b);
    for (size_t i = 0; i < m; ++i) out[at + i] = float(codes[at + i]) * scale;
  }
}

void accumulateInt8(const std::byte* y, const float* g, std::byte* out, size_t n) {
  const int8_t* in = codesOf(y, n);
  int8_t* codes = reinterpret_cast<int8_t*>(out + blocks(n) * sizeof(float));
  float sum[kInt8Block];
  for (size_t b = 0; b * kInt8Block < n; ++b) {
    const size_t at = b * kInt8Block, m = std::min(kInt8Block, n - at);
    const float scale = scaleAt(y, b);
    for (size_t i = 0; i < m; ++i) sum[i] = float(in[at + i]) * scale + g[at + i];
    float next;
    encodeBlock(sum, m, &next, codes + at);
    std::memcpy(out + b * sizeof(float), &next, sizeof(float));
  }
}

uint8_t int8GuardBits(const float* x, size_t n, int N) {
  const float high = FLT_MAX / float(N > 1 ? N : 1);
  bool risky = false;
  for (size_t i = 0; i < n; ++i) risky = risky || !(std::fabs(x[i]) < high);
  return risky ? 1 : 0;
}

}  // namespace cerar::codec
