// The int8 wire's loops (int8_wire.h), written once and compiled once per instruction set
// like codec_loops.h's: exact operations only (an integer maximum, one IEEE divide and one
// rounding per code, one multiply per value), so every build gives the same bytes and values.
// Internal linkage: a translation unit built for AVX-512 must never lend its copy of a loop to
// one built for the baseline.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "ops/codec/codec_simd.h"
#include "ops/codec/int8_wire.h"

namespace cerar::codec {
namespace {

inline size_t int8Blocks(size_t n) { return (n + kInt8Block - 1) / kInt8Block; }

// The bits of the largest |x[i]|: the magnitudes' bits (sign cleared) order as integers as the
// values do, inf above every finite value and NaN above inf, so one integer maximum (which
// the compiler vectorises, unlike a float maximum with its NaN rules) finds the largest
// magnitude and tells whether any element is not finite.
inline uint32_t largestMagnitudeBits(const float* __restrict x, size_t m) {
  uint32_t top = 0;
  for (size_t i = 0; i < m; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
    top = bits > top ? bits : top;
  }
  return top;
}

// One block of m <= kInt8Block elements: its scale, then its codes.
inline void encodeInt8Block(const float* __restrict x, size_t m, float* scale,
                            int8_t* __restrict codes) {
  const uint32_t top = largestMagnitudeBits(x, m);
  if (top >= 0x7f800000u) {  // inf or NaN
    *scale = std::numeric_limits<float>::quiet_NaN();
    std::memset(codes, 0, m);
    return;
  }
  *scale = std::bit_cast<float>(top) / 127.0f;
  if (*scale == 0) {  // all zero, or all below 127 * 2^-149 (left as 0: an error below 2^-142)
    std::memset(codes, 0, m);
    return;
  }
  const float s = *scale;
  for (size_t i = 0; i < m; ++i) {
    // |x / s| <= 127 (1 + 2^-23), so the rounded quotient is an int in [-128, 128]: the clamp
    // only catches that last ulp. Rounding: nearest, ties to even (the default mode).
    const int q = int(std::nearbyint(x[i] / s));
    codes[i] = int8_t(q < -127 ? -127 : (q > 127 ? 127 : q));
  }
}

void encodeInt8Loop(const float* x, std::byte* msg, size_t n) {
  int8_t* codes = reinterpret_cast<int8_t*>(msg + int8Blocks(n) * sizeof(float));
  for (size_t b = 0; b * kInt8Block < n; ++b) {
    const size_t at = b * kInt8Block, m = n - at < kInt8Block ? n - at : kInt8Block;
    float scale;
    encodeInt8Block(x + at, m, &scale, codes + at);
    std::memcpy(msg + b * sizeof(float), &scale, sizeof(float));
  }
}

void decodeInt8Loop(const std::byte* msg, float* out, size_t n) {
  const int8_t* codes = reinterpret_cast<const int8_t*>(msg + int8Blocks(n) * sizeof(float));
  for (size_t b = 0; b * kInt8Block < n; ++b) {
    const size_t at = b * kInt8Block, m = n - at < kInt8Block ? n - at : kInt8Block;
    float scale;
    std::memcpy(&scale, msg + b * sizeof(float), sizeof(float));
    for (size_t i = 0; i < m; ++i) out[at + i] = float(codes[at + i]) * scale;
  }
}

void accumulateInt8Loop(const std::byte* y, const float* g, std::byte* out, size_t n) {
  const int8_t* in = reinterpret_cast<const int8_t*>(y + int8Blocks(n) * sizeof(float));
  int8_t* codes = reinterpret_cast<int8_t*>(out + int8Blocks(n) * sizeof(float));
  alignas(64) float sum[kInt8Block];
  for (size_t b = 0; b * kInt8Block < n; ++b) {
    const size_t at = b * kInt8Block, m = n - at < kInt8Block ? n - at : kInt8Block;
    float scale;
    std::memcpy(&scale, y + b * sizeof(float), sizeof(float));
    for (size_t i = 0; i < m; ++i) sum[i] = float(in[at + i]) * scale + g[at + i];
    float next;
    encodeInt8Block(sum, m, &next, codes + at);
    std::memcpy(out + b * sizeof(float), &next, sizeof(float));
  }
}

constexpr Int8Kernels int8Loops() { return {encodeInt8Loop, decodeInt8Loop, accumulateInt8Loop}; }

}  // namespace
}  // namespace cerar::codec
