// 16-bit floating-point storage types (IEEE half and bfloat16) with exact conversions.
#pragma once

#include <cstdint>
#include <cstring>

namespace cerar::codec {

struct Half {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};

inline float bitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint32_t floatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

inline float toFloat(BFloat16 h) { return bitsToFloat(uint32_t(h.bits) << 16); }

inline float toFloat(Half h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1f;
  const uint32_t mantissa = h.bits & 0x3ff;
  if (exponent == 0x1f) return bitsToFloat(sign | 0x7f800000 | (mantissa << 13));  // inf/nan
  if (exponent == 0) {
    // Subnormal (or zero): mantissa * 2^-24, exact in float.
    const float magnitude = float(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

template <typename H>
H fromFloat(float f);

// Round to nearest even; NaN stays NaN.
template <>
inline BFloat16 fromFloat<BFloat16>(float f) {
  const uint32_t bits = floatToBits(f);
  if ((bits & 0x7fffffff) > 0x7f800000) return BFloat16{uint16_t((bits >> 16) | 0x40)};
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return BFloat16{uint16_t((bits + rounding) >> 16)};
}

template <>
inline Half fromFloat<Half>(float f) {
  const uint32_t bits = floatToBits(f);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) return Half{uint16_t(sign | 0x7e00)};     // nan
  if (magnitude >= 0x477ff000) return Half{uint16_t(sign | 0x7c00)};    // overflow to inf
  if (magnitude < 0x38800000) {
    // Subnormal half: round magnitude * 2^24 to an integer, nearest even (exact in float).
    const float scaled = bitsToFloat(magnitude) * 16777216.0f;
    float rounded = scaled + 12582912.0f;  // 1.5 * 2^23 forces rounding to an integer
    rounded -= 12582912.0f;
    return Half{uint16_t(sign | uint16_t(rounded))};
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  const uint32_t rebased = magnitude - (uint32_t(112) << 23);
  const uint32_t rounding = 0xfff + ((rebased >> 13) & 1);
  return Half{uint16_t(sign | ((rebased + rounding) >> 13))};
}

}  // namespace cerar::codec
