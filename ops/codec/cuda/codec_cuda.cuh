// Device-side element operations of the codec, shared by the kernels (and by any kernel that
// wants to fuse a round action into other work). Each mirrors ops/codec/codec.cc exactly:
// round-to-nearest intrinsics so that no build flag can contract a*b+c into an FMA, and the
// same comparisons as std::min/std::max (so NaN and signed zeros pick the same operand).
#pragma once

#include <cstdint>
#include <type_traits>

namespace cerar::cuda::dev {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// The same conversions as ops/codec/half.h, bit for bit.
__device__ inline float toFloat(BFloat16 h) { return __uint_as_float(uint32_t(h.bits) << 16); }
__device__ inline float toFloat(Half h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1f;
  const uint32_t mantissa = h.bits & 0x3ff;
  if (exponent == 0x1f) return __uint_as_float(sign | 0x7f800000 | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = __fmul_rn(float(mantissa), 5.9604644775390625e-8f);
    return sign ? -magnitude : magnitude;
  }
  return __uint_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}
__device__ inline void fromFloat(float f, BFloat16& out) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffff) > 0x7f800000) {
    out.bits = uint16_t((bits >> 16) | 0x40);
    return;
  }
  out.bits = uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}
__device__ inline void fromFloat(float f, Half& out) {
  const uint32_t bits = __float_as_uint(f);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) {
    out.bits = uint16_t(sign | 0x7e00);
  } else if (magnitude >= 0x477ff000) {
    out.bits = uint16_t(sign | 0x7c00);
  } else if (magnitude < 0x38800000) {
    const float scaled = __fmul_rn(__uint_as_float(magnitude), 16777216.0f);
    const float rounded = __fadd_rn(__fadd_rn(scaled, 12582912.0f), -12582912.0f);
    out.bits = uint16_t(sign | uint16_t(rounded));
  } else {
    const uint32_t rebased = magnitude - (uint32_t(112) << 23);
    out.bits = uint16_t(sign | ((rebased + 0xfff + ((rebased >> 13) & 1)) >> 13));
  }
}

// Rounded arithmetic per type; integers wrap like the CPU's two's complement.
__device__ inline float add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double sub(double a, double b) { return __dsub_rn(a, b); }
__device__ inline float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double div(double a, double b) { return __ddiv_rn(a, b); }
template <typename T>
__device__ inline T add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return T(U(a) + U(b));
}

enum class Op { kSum, kMin, kMax };

// combine(a, b) as codec.cc's Sum/Min/Max: std::min(a, b) is (b < a) ? b : a, and
// std::max(a, b) is (a < b) ? b : a.
template <Op op, typename T>
__device__ inline T combine(T a, T b) {
  if constexpr (op == Op::kSum) return add(a, b);
  else if constexpr (op == Op::kMin) return (b < a) ? b : a;
  else return (a < b) ? b : a;
}
// Half types: widened to float, combined, rounded back after every step.
template <Op op, typename H>
__device__ inline H combineHalf(H a, H b) {
  H out;
  fromFloat(combine<op>(toFloat(a), toFloat(b)), out);
  return out;
}
template <Op op>
__device__ inline Half combine(Half a, Half b) { return combineHalf<op>(a, b); }
template <Op op>
__device__ inline BFloat16 combine(BFloat16 a, BFloat16 b) { return combineHalf<op>(a, b); }

// finishDecode: (y - previous) / eps + out.
template <typename T>
__device__ inline T decode(T eps, T y, T previous, T out) {
  return add(div(sub(y, previous), eps), out);
}
// storeAndEncode: y + eps * g, and y + 0 for the zero padding (turns -0 into +0 as the CPU).
template <typename T>
__device__ inline T encode(T eps, T y, T g) { return add(y, mul(eps, g)); }
template <typename T>
__device__ inline T pad(T y) { return add(y, T(0)); }

}  // namespace cerar::cuda::dev
