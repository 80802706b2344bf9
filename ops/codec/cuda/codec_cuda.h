// The CERAR codec on a CUDA device: the round actions of ops/codec/codec.h as fused kernels.
//
// Plain C++ declarations (no CUDA headers) so that host code can call them; `stream` is a
// cudaStream_t. Every call only enqueues work on `stream` and returns; the pointers are device
// memory (or memory the device can address) and must stay valid until the stream reaches the
// work. Results equal the CPU codec bit for bit: the same dtype arithmetic, no FMA contraction
// (the kernels use round-to-nearest intrinsics and are built with --fmad=false).
// Launch errors throw cerar::Error.
#pragma once

#include <cstddef>
#include <string>

#include "common/dtype.h"

namespace cerar::cuda {

// msg = y (op) g. Every dtype; f16/bf16 are reduced in float as the CPU codec does.
void accumulate(DType dtype, ReduceOp op, const void* y, const void* g, void* msg, size_t n,
                void* stream);
// out = y (op) out, in place.
void finishFirst(DType dtype, ReduceOp op, const void* y, void* out, size_t n, void* stream);
// out = (y - previous) / eps + out, in place. f32/f64 only.
void finishDecode(DType dtype, double eps, const void* y, const void* previous, void* out,
                  size_t n, void* stream);
// store = y; msg = y + eps * g for elements < gLength, y + 0 beyond. f32/f64 only; `store`
// may be null. One read of y and g, one write of msg (and store) per element.
void storeAndEncode(DType dtype, double eps, const void* y, const void* g, size_t gLength,
                    void* store, void* msg, size_t n, void* stream);
// out = y.
void store(DType dtype, const void* y, void* out, size_t n, void* stream);

// data *= factor, in place, as the host's scaledCopy (core/execution/scaling.h): f32/f64 in their own
// precision, f16/bf16 through float. factor 1 enqueues nothing; other dtypes throw.
void scale(DType dtype, void* data, size_t n, double factor, void* stream);
// data = the identity of `op` (0; +inf/-inf for min/max, the extremes for integers), as the
// host's fillIdentity.
void fillIdentity(DType dtype, ReduceOp op, void* data, size_t n, void* stream);

// *flag |= 1 when any of the n elements (f32/f64) has a biased exponent field of at least
// `exponentLimit`: CERAR's range test (ops/codec/range.h; NaN and Inf have all ones). `flag`
// is device memory, which the caller clears.
void rangeTest(DType dtype, const void* data, size_t n, unsigned exponentLimit, unsigned* flag,
               void* stream);

// One segment of a batched copy (fusion buffers: many tensors into one buffer and back).
struct CopySegment {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};
// Copies `count` segments in one launch. `segments` is a device array of descriptors;
// `maxBytes` (the longest segment, a hint) sizes the grid. Segments must not overlap.
void batchedCopy(const CopySegment* segments, int count, size_t maxBytes, void* stream);

// The number of usable devices; 0 (with the reason in *why) where the runtime reports none,
// e.g. no driver or no GPU. Never throws.
int deviceCount(std::string* why = nullptr);

}  // namespace cerar::cuda
