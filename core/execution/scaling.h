// Element-wise helpers of the fusion buffer: the scaling copy that also tests CERAR's range
// while packing, and the identity a joined rank contributes (the plain scaling copy is the
// codec's, ops/codec/scale.h).
#pragma once

#include <cstddef>

#include "common/dtype.h"
#include "ops/codec/scale.h"  // scaledCopy, isFloatDType

namespace cerar {

// scaledCopy for f32 and f64 that also returns whether any value written is beyond CERAR's
// range on N ranks (ops/codec/range.h), in the same pass over memory. src and dst are equal
// or disjoint.
bool scaledCopyChecked(DType dtype, const void* src, void* dst, size_t n, double factor, int N);

// The identity of `op`: 0 for sum; +inf / -inf for min / max (the dtype's extremes for
// integers).
void fillIdentity(DType dtype, ReduceOp op, void* dst, size_t n);

}  // namespace cerar
