// The error budget (CERAR_MAX_ERROR, docs/wires.md "Error budget"): per fused buffer, the
// fastest of the float32 exact ring, CERAR(c, eps) and, where allowed, the exact ring with a
// 16-bit wire, among those whose predicted error fits the budget. Predicted errors are
// relative to max_e sum_i |g_i(e)|: calibrated on measurement by default, the spec's bounds
// below under CERAR_ERROR_BOUND=strict (core/policy/error_calibration.h); times come from the cost
// model. Pure.
#pragma once

#include <cstddef>

#include "core/policy/error_calibration.h"
#include "core/policy/selection.h"

namespace cerar {

// Bounds on max |result - sum| / max_e sum_i |g_i(e)|, each per element to first order.
// The exact ring: (N-1) u, u the dtype's unit roundoff (0 for integers and min/max).
double ringErrorBound(int N, DType dtype, ReduceOp op);
// The exact ring of float32 data with a 16-bit wire: N casts of at most u_w each (the first
// slice, N-2 partial sums, the owner's total) and N-1 float32 adds:
// N u_w + (N-1) 2^-24, u_w = 2^-11 (fp16) or 2^-8 (bf16). fp16 adds N 2^-15: the subnormal
// casts' absolute 2^-25 each, relative to a largest |g| of at least 2^-10, which the budget's
// guard checks before it sends (codec::fp16GuardBits). int8: u_w = (1 + 2^-24) / 254 + 2^-24
// relative to the largest partial sum of the cast's block (ops/codec/int8_wire.h), so relative
// to the buffer's largest sum of magnitudes as well.
double wireErrorBound(int N, Wire wire);

// The eps of CERAR(c) with the smallest predicted error (a power of two), for a budget the
// default eps misses: modelEps for strict bounds; the calibrated prediction's own minimum,
// which its smaller rounding term puts at a smaller eps.
double budgetEps(int N, int c, DType dtype, size_t elements, ErrorBound bound);

// The exact ring with a 16-bit wire, streamed in segments like the float32 ring: per round
// alpha + (w + min(w, segment)) (beta + 2 gammaWire) for a message of w = d/(2N) 16-bit
// bytes (gammaWire per float32 byte); T = 2(N-1) times that. With the probe's wire rounds
// (LinkModel::wireRounds, fp16's; bf16 casts cost about the same), their time per round.
double wireRingSeconds(int N, double bytes, const LinkModel& link);
// The same ring with the int8 wire: the bytes of a 16-bit wire ring of half the elements (plus
// a scale per block), and the casts of all of them at the 16-bit casts' cost per element.
double int8RingSeconds(int N, double bytes, const LinkModel& link);

// What the budget may choose for one buffer. `onHost`: reduced in host memory, where the lossy
// wires that carry the data (wireCarries, ops/codec/wire.h) may be chosen.
struct BudgetQuery {
  int N = 1;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t elements = 0;
  bool onHost = false;
};

// The predicted error the stats and the timeline report for a choice as run: CERAR(c, eps)
// where `cerar`, else the exact ring with `wire` (kNone: float32 or the dtype's own); 0 for
// min/max. `bound`: the budget's kind for a budgeted decision, kStrict otherwise.
double reportedError(const BudgetQuery& query, bool cerar, int c, double eps, Wire wire,
                     ErrorBound bound);

// The choice (Selection::budgeted set): among candidates whose predicted error (calibrated, or
// strict with policy.strictErrorBound) is at most policy.maxError, the fastest by the model.
// Approximate candidates (CERAR for N > 2 and sums of at least policy.minCerarBytes; the wires
// listed, at any size) must beat the exact ring's time by policy.minGain; CERAR's eps is
// policy.eps, else the default, else budgetEps where the default misses. The exact ring when
// nothing else fits, even if its own rounding exceeds the budget.
Selection selectWithinBudget(const BudgetQuery& query, const LinkModel& link,
                             const SelectionPolicy& policy);

}  // namespace cerar
