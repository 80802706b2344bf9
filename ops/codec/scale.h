// Scaling copies in a tensor's dtype (prescale, postscale, average): the fusion buffer's and
// the exact ring's, which scales each slice once where it is finished (ops/communicator.h).
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace cerar {

// dst = src * factor, n elements, in the tensor's dtype (half types through float). factor 1
// is a plain copy; src == dst works in place. Integer dtypes accept factor 1 only.
void scaledCopy(DType dtype, const void* src, void* dst, size_t n, double factor);

// True for the floating-point dtypes (f32, f64, f16, bf16): those that may be scaled and
// averaged.
bool isFloatDType(DType dtype);

}  // namespace cerar
