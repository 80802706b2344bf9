// Share-corrected decoding of CERAR (cerar-protocol.md, "What each worker ends with").
//
// A rank at position j >= 2 on a token stores, for slices l < r-1, Shat(l) + eps*A_j(l+1), where
// A_j is the partial sum of slice l+1 over positions 1..j-1. Gradients of different ranks are
// correlated, so A_j(l+1) is close to (j-1)/N of the full sum S(l+1); subtracting that expected
// share, walking back from the exact last slice, removes most of the contamination:
//   corrected(r-1) = result(r-1);  corrected(l) = result(l) - eps*(j-1)/N * corrected(l+1).
// It is a local post-pass on one rank's result; it sends nothing and costs one pass over the
// contaminated slices. Ranks still do not end bit-identical.
#pragma once

#include <cstddef>

#include "ops/algorithms/plan.h"
#include "common/dtype.h"

namespace cerar {

// Applies the correction in place to `data` (layout.d() elements of dtype, f32 or f64), the
// CERAR result of `rank` with components layout.c() and scale eps. Arithmetic is in the dtype.
// The home's and position 1's chunks are left untouched, so r = 1 (the exact ring) is a no-op.
void applyShareCorrection(const Layout& layout, int rank, double eps, DType dtype, void* data);

// Per-element bound on CERAR's error relative to sum_i |g_i| over the buffer, from the spec's
// error terms: eps (position j >= 2 holds eps*A_j, |A_j| <= sum|g|) plus the home's rounding
// amplified by 1/eps, (N-1)*u/eps + (N+1)*u. Zero for r = 1 (c = N) or N <= 2 with r = 1.
double predictedErrorBound(int N, int c, double eps, DType dtype);

// The power of two nearest the eps that minimises predictedErrorBound: sqrt((N-1)*u).
double modelEps(int N, DType dtype);

}  // namespace cerar
