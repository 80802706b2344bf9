// The range test behind CERAR's exact-ring fallback (cerar-protocol.md, "Non-finite and
// near-overflow inputs"): NaN, +-Inf, and magnitudes so large that a sum over N ranks, or a
// CERAR message built from them, could overflow.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/dtype.h"

namespace cerar::codec {

// ceil(log2 N) + 1: values below 2^(emax + 1 - guard) sum, over N ranks, to at most half the
// dtype's largest finite value, which leaves CERAR's eps-sized additions room.
int rangeGuardBits(int N);
// The smallest biased exponent field that the test flags for `dtype` (f32: 255, f64: 2047 are
// NaN and Inf) on N ranks: all ones minus rangeGuardBits(N).
unsigned rangeExponentLimit(DType dtype, int N);

// Whether any value seen is NaN, +-Inf or has |x| >= 2^(emax + 1 - rangeGuardBits(N)).
// One AND, ADD and OR on the bits per value, no branch, so loops over it vectorise: adding
// `bias_` to the exponent field carries into the sign bit exactly when the field is at least
// the limit's (all ones, NaN and Inf, included).
template <typename T>
class RangeCheck {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);

 public:
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

  explicit RangeCheck(int N)
      : bias_(kSign - (Bits(kExponentOnes - rangeGuardBits(N)) << kMantissaBits)) {}
  static constexpr Bits kExponent = Bits(sizeof(T) == 4 ? 0xff : 0x7ff)
                                    << (sizeof(T) == 4 ? 23 : 52);

  Bits term(T x) const { return (std::bit_cast<Bits>(x) & kExponent) + bias_; }
  // For hand-vectorised loops: term(x) = (bits of x & kExponent) + bias().
  Bits bias() const { return bias_; }
  // Equivalently, x is flagged iff (bits of x & kExponent) >= limit(); a loop may keep the
  // maximum of the masked bits and fold it in with term-like `flagged(max)`.
  Bits limit() const { return kSign - bias_; }
  Bits flagged(Bits maskedMax) const { return maskedMax >= limit() ? kSign : 0; }
  // `accumulated`: the OR of term() over the values.
  static bool beyond(Bits accumulated) { return (accumulated & kSign) != 0; }

 private:
  static constexpr int kMantissaBits = sizeof(T) == 4 ? 23 : 52;
  static constexpr Bits kExponentOnes = sizeof(T) == 4 ? 0xff : 0x7ff;
  static constexpr Bits kSign = Bits(1) << (8 * sizeof(T) - 1);
  Bits bias_;
};

// The test over n elements at `data` (f32 or f64). A read of the buffer; where a copy is made
// anyway, fold RangeCheck into it instead (core/execution/scaling.h).
bool beyondCerarRange(DType dtype, const void* data, size_t n, int N);

}  // namespace cerar::codec
