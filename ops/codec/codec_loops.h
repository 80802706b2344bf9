// The codec's hot element loops, written once and compiled once per instruction set
// (codec_simd.cc, codec_simd_avx2.cc, codec_simd_avx512.cc): each element is computed by the
// same operations in the same order whatever the vector width, so every build of them agrees
// bit for bit with the others and with the CUDA codec.
//
// Everything here has internal linkage (an unnamed namespace): a translation unit built for
// AVX-512 must never lend its copy of a loop to one built for the baseline.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "ops/codec/codec_simd.h"
#include "ops/codec/half.h"
#include "ops/codec/int8_loops.h"

namespace cerar::codec {
namespace {

template <typename T>
void addLoop(const T* __restrict y, const T* __restrict g, T* __restrict out, size_t n) {
  for (size_t e = 0; e < n; ++e) out[e] = y[e] + g[e];
}

template <typename T>
void addInPlaceLoop(const T* __restrict y, T* __restrict out, size_t n) {
  for (size_t e = 0; e < n; ++e) out[e] = y[e] + out[e];
}

// msg = y + eps * g, then the zero padding: y + eps*0 is y + 0, which turns -0 into +0;
// computed, not copied, so that every implementation sends the same bits. The copy to
// `store` rides in the same pass, which reads y once instead of twice.
template <typename T>
void encodeLoop(T eps, const T* __restrict y, const T* __restrict g, size_t gLength,
                T* __restrict store, T* __restrict msg, size_t n) {
  const size_t head = gLength < n ? gLength : n;
  if (store != nullptr) {
    for (size_t e = 0; e < head; ++e) {
      store[e] = y[e];
      msg[e] = y[e] + eps * g[e];
    }
    for (size_t e = head; e < n; ++e) {
      store[e] = y[e];
      msg[e] = y[e] + T(0);
    }
    return;
  }
  for (size_t e = 0; e < head; ++e) msg[e] = y[e] + eps * g[e];
  for (size_t e = head; e < n; ++e) msg[e] = y[e] + T(0);
}

// Whether x / eps equals x * (1 / eps) for every x: eps is +-2^k and 2^-k is a T (normal or
// subnormal). Both are then the correctly rounded value of the same real number, NaN, inf,
// overflow and subnormal results included, so the multiply (several times the divide's
// throughput) gives the divide's bits.
template <typename T>
bool reciprocalIsExact(T eps) {
  int exponent = 0;
  return std::abs(std::frexp(eps, &exponent)) == T(0.5) && std::isfinite(T(1) / eps);
}

// out = (y - previous) / eps + out.
template <typename T>
void decodeLoop(T eps, const T* __restrict y, const T* __restrict previous, T* __restrict out,
                size_t n) {
  if (reciprocalIsExact(eps)) {
    const T inverse = T(1) / eps;
    for (size_t e = 0; e < n; ++e) out[e] = (y[e] - previous[e]) * inverse + out[e];
    return;
  }
  for (size_t e = 0; e < n; ++e) out[e] = (y[e] - previous[e]) / eps + out[e];
}

template <typename H>
void wireEncodeLoop(const float* __restrict x, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = fromFloat<H>(x[i]).bits;
}

template <typename H>
void wireDecodeLoop(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = toFloat(H{in[i]});
}

// out = cast(float(y) + g): one hop of the reduce-scatter, the add in float32.
template <typename H>
void wireAccumulateLoop(const uint16_t* __restrict y, const float* __restrict g,
                        uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = fromFloat<H>(toFloat(H{y[i]}) + g[i]).bits;
}

template <typename T>
constexpr FloatKernels<T> floatLoops() {
  return {addLoop<T>, addInPlaceLoop<T>, encodeLoop<T>, decodeLoop<T>};
}

template <typename H>
constexpr WireKernels wireLoops() {
  return {wireEncodeLoop<H>, wireDecodeLoop<H>, wireAccumulateLoop<H>};
}

// The whole table built from the loops above; a variant may then replace entries.
constexpr Kernels loopKernels() {
  return {floatLoops<float>(), floatLoops<double>(), wireLoops<Half>(), wireLoops<BFloat16>(),
          int8Loops()};
}

}  // namespace
}  // namespace cerar::codec
