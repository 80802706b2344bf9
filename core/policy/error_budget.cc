#include "core/policy/error_budget.h"

#include <algorithm>
#include <cmath>

#include "core/policy/error_calibration.h"
#include "ops/algorithms/share_correction.h"
#include "ops/codec/int8_wire.h"

namespace cerar {
double ringErrorBound(int N, DType dtype, ReduceOp op) {
  if (N <= 1 || op != ReduceOp::kSum) return 0;  // min/max pick an input: exact
  return (N - 1) * unitRoundoff(dtype);
}

double wireErrorBound(int N, Wire wire) {
  if (N <= 1 || wire == Wire::kNone) return ringErrorBound(N, DType::kFloat32, ReduceOp::kSum);
  double uw = std::ldexp(1.0, -8);
  if (wire == Wire::kFloat16) uw = std::ldexp(1.0, -11) + std::ldexp(1.0, -15);
  // int8: half a scale (max|block| / 127, rounded up by at most 2^-24) plus the decode's
  // float32 multiply, relative to the block's largest partial sum.
  if (wire == Wire::kInt8) uw = (1.0 + std::ldexp(1.0, -24)) / 254.0 + std::ldexp(1.0, -24);
  return N * uw + (N - 1) * std::ldexp(1.0, -24);
}

double budgetEps(int N, int c, DType dtype, size_t elements, ErrorBound bound) {
  if (bound == ErrorBound::kStrict) return modelEps(N, dtype);
  // The calibrated prediction's minimum lies below the strict one's (its rounding term is
  // smaller): the power of two with the smallest prediction, looking down from modelEps.
  double best = modelEps(N, dtype);
  for (double eps = best / 2; eps >= best / 16; eps /= 2) {
    if (predictedError(ErrorChoice::cerar(c, eps, dtype), N, elements, bound) <
        predictedError(ErrorChoice::cerar(c, best, dtype), N, elements, bound))
      best = eps;
  }
  return best;
}

double reportedError(const BudgetQuery& q, bool cerar, int c, double eps, Wire wire,
                     ErrorBound bound) {
  if (q.op != ReduceOp::kSum) return 0;  // min/max pick an input: exact
  const ErrorChoice choice = cerar                  ? ErrorChoice::cerar(c, eps, q.dtype)
                             : wire != Wire::kNone ? ErrorChoice::wireRing(wire, q.dtype)
                                                   : ErrorChoice::ring(q.dtype);
  return predictedError(choice, q.N, q.elements, bound);
}

double wireRingSeconds(int N, double bytes, const LinkModel& link) {
  if (N <= 1) return 0;
  const double message = bytes / N / 2;  // 16-bit bytes
  if (!link.wireRounds.empty())
    return 2.0 * (N - 1) * measuredRoundSeconds(message, link.wireRounds, link);
  const double gammaWire = link.gammaWire > 0 ? link.gammaWire : 2 * link.gamma;
  // gammaWire is per float32 byte: twice that per 16-bit byte.
  return 2.0 * (N - 1) *
         (transferSeconds(message, link) + arithmeticBytes(message, link) * 2 * gammaWire);
}

double int8RingSeconds(int N, double bytes, const LinkModel& link) {
  if (N <= 1) return 0;
  // A 16-bit wire ring of half the elements sends the same bytes (plus the scales) and casts
  // half of them; the other half's casts on top, at the 16-bit casts' cost per element.
  const double scales = 1.0 + 4.0 / double(codec::kInt8Block);
  const double gammaWire = link.gammaWire > 0 ? link.gammaWire : 2 * link.gamma;
  return wireRingSeconds(N, bytes / 2 * scales, link) +
         2.0 * (N - 1) * (bytes / 2 / N) * gammaWire;
}

Selection selectWithinBudget(const BudgetQuery& q, const LinkModel& link,
                             const SelectionPolicy& policy) {
  const double bytes = double(q.elements) * dtypeSize(q.dtype);
  const ErrorBound bound = policy.strictErrorBound ? ErrorBound::kStrict : ErrorBound::kCalibrated;
  const auto predicted = [&](const ErrorChoice& choice) {
    return predictedError(choice, q.N, q.elements, bound);
  };
  Selection best{Algorithm::kRing, q.N, 0, ringSeconds(q.N, bytes, link)};
  best.budgeted = true;
  best.predictedError = q.op == ReduceOp::kSum ? predicted(ErrorChoice::ring(q.dtype)) : 0;
  if (q.N < 2 || q.op != ReduceOp::kSum) return best;
  const double limit = (1.0 - policy.minGain) * best.predictedSeconds;
  // Whatever passes beats the exact ring; among those the fastest, on a tie the more accurate.
  const auto consider = [&](const Selection& s) {
    if (s.predictedError > policy.maxError || s.predictedSeconds > limit) return;
    if (s.predictedSeconds < best.predictedSeconds ||
        (s.predictedSeconds == best.predictedSeconds && s.predictedError < best.predictedError)) {
      best = s;
    }
  };
  // At N = 2 CERAR sends what the ring sends; below minCerarBytes it does not pay. A wire is
  // considered at every size: the model (and minGain) decides whether it pays.
  if (isCerarDType(q.dtype) && q.N > 2 && bytes >= double(policy.minCerarBytes)) {
    const int c = policy.components > 0 ? policy.components
                                        : bestComponents(q.N, bytes, q.elements, link);
    if (c > q.N) {
      double eps = policy.eps > 0 ? policy.eps : defaultEps(q.dtype);
      if (policy.eps <= 0 && predicted(ErrorChoice::cerar(c, eps, q.dtype)) > policy.maxError)
        eps = budgetEps(q.N, c, q.dtype, q.elements, bound);
      Selection cerar{Algorithm::kCerar, c, eps, cerarSeconds(q.N, c, bytes, link)};
      cerar.budgeted = true;
      cerar.predictedError = predicted(ErrorChoice::cerar(c, eps, q.dtype));
      consider(cerar);
    }
  }
  if (q.onHost) {
    for (const Wire wire : {Wire::kFloat16, Wire::kBFloat16, Wire::kInt8}) {
      const bool allowed = wire == Wire::kFloat16  ? policy.allowFp16
                           : wire == Wire::kBFloat16 ? policy.allowBf16
                                                     : policy.allowInt8;
      if (!allowed || !wireCarries(wire, q.dtype, q.op)) continue;
      // The int8 wire's ring sends and casts the same whatever the data's width.
      const double seconds = wire == Wire::kInt8 ? int8RingSeconds(q.N, 4.0 * q.elements, link)
                                                 : wireRingSeconds(q.N, bytes, link);
      Selection ring{Algorithm::kRing, q.N, 0, seconds};
      ring.wire = wire;
      ring.budgeted = true;
      ring.predictedError = predicted(ErrorChoice::wireRing(wire, q.dtype));
      consider(ring);
    }
  }
  return best;
}

}  // namespace cerar
