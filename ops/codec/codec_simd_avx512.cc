// bfloat16's wire casts and the int8 wire's loops built for AVX-512 (the build gives this file -mavx512f -mavx512bw
// -mavx512vl -mf16c, never -mfma: contraction stays off): codec_loops.h's loops, 16 floats
// wide. fp16's are F16C's (codec_simd_avx2.cc) on every CPU that has them.
#include "ops/codec/codec_loops.h"

namespace cerar::codec {

constinit const WireKernels kBf16Avx512 = wireLoops<BFloat16>();
constinit const Int8Kernels kInt8Avx512 = int8Loops();

}  // namespace cerar::codec
