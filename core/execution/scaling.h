// Element-wise helpers of the fusion buffer: copies that scale (prescale, postscale, average)
// and the identity a joined rank contributes.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace cerar {

// dst = src * factor, n elements, in the tensor's dtype (half types through float). factor 1
// is a plain copy; src == dst works in place. Integer dtypes accept factor 1 only.
void scaledCopy(DType dtype, const void* src, void* dst, size_t n, double factor);

// scaledCopy for f32 and f64 that also returns whether any value written is beyond CERAR's
// range on N ranks (ops/codec/range.h), in the same pass over memory. src and dst are equal
// or disjoint.
bool scaledCopyChecked(DType dtype, const void* src, void* dst, size_t n, double factor, int N);

// The identity of `op`: 0 for sum; +inf / -inf for min / max (the dtype's extremes for
// integers).
void fillIdentity(DType dtype, ReduceOp op, void* dst, size_t n);

// True for the floating-point dtypes (f32, f64, f16, bf16): those that may be scaled and
// averaged.
bool isFloatDType(DType dtype);

}  // namespace cerar
