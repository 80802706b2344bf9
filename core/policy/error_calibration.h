// Predicted errors of the error budget's choices (docs/wires.md, "Error budget"), relative to
// max_e sum_i |g_i(e)| as the measured error is. Two kinds:
// - strict: the worst-case bounds (ringErrorBound, wireErrorBound, predictedErrorBound), which
//   hold for any data;
// - calibrated (the default): what the measured max relative error of a buffer stayed under
//   in at least 99.9 % of buffers of the suite's data (Gaussian, mean + noise, heavy-tailed,
//   sparse, real gradients) for N = 2..32, measured by bench/error_calibration.cc; never above
//   the strict bound. Float32 sums only (what was measured); float64 keeps the strict bound.
//   Rounding errors of independent elements rarely line up, so the largest of a buffer grows
//   with its length: the prediction includes that growth.
// Pure.
#pragma once

#include <cstddef>
#include <string>

#include "ops/codec/wire.h"
#include "common/dtype.h"

namespace cerar {

// The dtype's unit roundoff (2^-24 for f32, 2^-11 f16, 2^-8 bf16, 2^-53 f64; 0 for integers).
double unitRoundoff(DType dtype);

enum class ErrorBound { kCalibrated, kStrict };
const char* errorBoundName(ErrorBound bound);       // "calibrated" | "strict"
ErrorBound parseErrorBound(const std::string& name);  // throws kInvalidArgument

// One choice of the budget: the exact ring (of `dtype`), CERAR(c, eps) or the exact float32
// ring with a lossy wire.
struct ErrorChoice {
  enum class Kind { kRing, kCerar, kWire } kind = Kind::kRing;
  DType dtype = DType::kFloat32;
  int c = 0;
  double eps = 0;
  Wire wire = Wire::kNone;

  static ErrorChoice ring(DType dtype) { return {Kind::kRing, dtype, 0, 0, Wire::kNone}; }
  static ErrorChoice cerar(int c, double eps, DType dtype) {
    return {Kind::kCerar, dtype, c, eps, Wire::kNone};
  }
  // `dtype`: the data's (float16/bfloat16 only with the int8 wire, over a float32 copy).
  static ErrorChoice wireRing(Wire wire, DType dtype = DType::kFloat32) {
    return {Kind::kWire, dtype, 0, 0, wire};
  }
};

// The predicted max |result - sum| / max_e sum_i |g_i(e)| of a sum of `elements` elements
// over N ranks. Min/max and integer sums are not choices here (they take the exact ring, 0).
double predictedError(const ErrorChoice& choice, int N, size_t elements, ErrorBound bound);

}  // namespace cerar
