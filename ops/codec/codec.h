// The arithmetic of one round, element-wise over a segment (cerar-protocol.md, "Schedule").
//
// Each function works on elements [0, n) of its spans; the executor passes segment offsets.
// Arithmetic is in the tensor's dtype with no FMA contraction (the build pins
// -ffp-contract=off), so CPU, GPU and any conforming implementation agree bit for bit.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace cerar::codec {

// msg = y (op) g. Every dtype; kSum, kMin, kMax.
void accumulate(DType dtype, ReduceOp op, const void* y, const void* g, void* msg, size_t n);
// out = y (op) out, in place on the gradient slice (the home adds its own gradient last).
void finishFirst(DType dtype, ReduceOp op, const void* y, void* out, size_t n);
// out = (y - previous) / eps + out, in place. f32/f64 only.
void finishDecode(DType dtype, double eps, const void* y, const void* previous, void* out,
                  size_t n);
// store = y; msg = y + eps * g for elements < gLength, y + 0 beyond (the zero padding).
// f32/f64 only. `store` may be null (nothing to store).
void storeAndEncode(DType dtype, double eps, const void* y, const void* g, size_t gLength,
                    void* store, void* msg, size_t n);
// out = y.
void store(DType dtype, const void* y, void* out, size_t n);

}  // namespace cerar::codec
