#include "core/policy/error_calibration.h"

#include <algorithm>
#include <cmath>

#include "core/policy/error_budget.h"
#include "ops/algorithms/share_correction.h"
#include "common/error.h"

namespace cerar {
namespace {

// The measured shares of the worst case (bench/error_calibration.cc; the table in docs/wires.md).
// The N - 1 adds and N casts of an element round independently, so their errors add like a
// random walk: the largest error of a buffer stayed under kRounding / sqrt(N - 1) of the worst
// case in at least 99.9 % of buffers (one dominant element whose partial sums sit just above a
// power of two reaches about 1.2 / sqrt(N - 1)). CERAR's home rounding, amplified by 1/eps,
// reached at most 0.37 of its term at N = 4..32 (real gradients), whatever N: kCerarRounding. Both grow by
// kGrowthPerDoubling per doubling of the length beyond kReferenceLength elements (measured:
// no growth up to 2^17; the margin covers longer buffers).
constexpr double kRounding = 1.6;
constexpr double kCerarRounding = 0.4;
constexpr double kReferenceLength = 2048;
constexpr double kGrowthPerDoubling = 0.02;
// The int8 wire: an element's error is the sum of its N roundings, each within half a step of
// its block's scale, which hops round independently; the largest over a buffer stayed under
// kInt8Rounding / sqrt(N) of the worst case in at least 99.9 % of buffers (heavy-tailed data,
// where one element sets a block's scale at every hop, come closest: 0.94 at N = 4, 0.76 at 8,
// 0.59 at 16, 0.37 at 32, lengths 1024-262144), so it is the strict bound below N = 7.
constexpr double kInt8Rounding = 2.6;

double lengthGrowth(size_t elements) {
  return 1 + kGrowthPerDoubling * std::max(0.0, std::log2(double(elements) / kReferenceLength));
}

// CERAR's eps term is kept whole: where one rank's value dominates an element (heavy-tailed and
// sparse data) a position's partial sum is that element's whole sum of magnitudes, and the
// measured error reaches eps.
double calibratedCerar(const ErrorChoice& choice, int N, size_t elements) {
  const double u = unitRoundoff(choice.dtype);
  return choice.eps +
         ((N - 1) * u / choice.eps + (N + 1) * u) * kCerarRounding * lengthGrowth(elements);
}

double strictError(const ErrorChoice& choice, int N) {
  switch (choice.kind) {
    case ErrorChoice::Kind::kRing: return ringErrorBound(N, choice.dtype, ReduceOp::kSum);
    case ErrorChoice::Kind::kCerar: return predictedErrorBound(N, choice.c, choice.eps, choice.dtype);
    case ErrorChoice::Kind::kWire: return wireErrorBound(N, choice.wire);
  }
  return 0;
}

}  // namespace

double unitRoundoff(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return std::ldexp(1.0, -53);
    case DType::kFloat32: return std::ldexp(1.0, -24);
    case DType::kFloat16: return std::ldexp(1.0, -11);
    case DType::kBFloat16: return std::ldexp(1.0, -8);
    default: return 0;  // integers sum exactly (or wrap, as the ring would anyway)
  }
}

const char* errorBoundName(ErrorBound bound) {
  return bound == ErrorBound::kStrict ? "strict" : "calibrated";
}

ErrorBound parseErrorBound(const std::string& name) {
  if (name == "strict") return ErrorBound::kStrict;
  CERAR_CHECK_ARGUMENT(name == "calibrated", "CERAR_ERROR_BOUND must be calibrated or strict, got '",
                       name, "'");
  return ErrorBound::kCalibrated;
}

double predictedError(const ErrorChoice& choice, int N, size_t elements, ErrorBound bound) {
  // 16-bit data on the int8 wire: the float32 run's error, and the result rounded once to the
  // data's format (its unit roundoff relative to |sum| <= the sum of magnitudes).
  if (choice.kind == ErrorChoice::Kind::kWire && choice.dtype != DType::kFloat32) {
    return predictedError(ErrorChoice::wireRing(choice.wire), N, elements, bound) +
           unitRoundoff(choice.dtype);
  }
  const double strict = strictError(choice, N);
  // Only float32 was measured (the 16-bit wires carry float32 data): float64 keeps its bound.
  if (bound == ErrorBound::kStrict || N <= 1 || choice.dtype != DType::kFloat32) return strict;
  if (choice.kind == ErrorChoice::Kind::kWire && choice.wire == Wire::kInt8)
    return strict * std::min(1.0, kInt8Rounding / std::sqrt(double(N)) * lengthGrowth(elements));
  if (choice.kind == ErrorChoice::Kind::kCerar && choice.c > N)
    return std::min(strict, calibratedCerar(choice, N, elements));
  return strict * std::min(1.0, kRounding / std::sqrt(N - 1.0) * lengthGrowth(elements));
}

}  // namespace cerar
