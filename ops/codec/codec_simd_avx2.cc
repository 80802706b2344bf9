// The 16-bit wire casts and the int8 wire's loops built for AVX2 with F16C (the build gives
// this file -mavx2 -mf16c, never -mfma: contraction stays off). int8's and bfloat16's are
// codec_loops.h's, twice as wide; fp16's use F16C's conversions, which round as half.h does
// (nearest even, subnormals, overflow to inf) and differ only on NaN, which is put right here.
#include <immintrin.h>

#include "ops/codec/codec_loops.h"

namespace cerar::codec {
namespace {

constexpr int kNearestEven = _MM_FROUND_TO_NEAREST_INT;  // the rounding in the immediate

// vcvtps2ph keeps a NaN's payload; half.h sends its sign and 0x7e00, which is what the quiet
// NaN of the same sign converts to.
__m128i halvesOf(__m256 x) {
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 quiet = _mm256_or_ps(_mm256_and_ps(x, _mm256_set1_ps(-0.0f)),
                                    _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
  return _mm256_cvtps_ph(_mm256_blendv_ps(x, quiet, nan), kNearestEven);
}

// vcvtph2ps quiets a signalling NaN; half.h keeps its bits: in NaN lanes the float's bit 22
// is the half's bit 9.
__m256 floatsOf(__m128i halves) {
  const __m256i bits = _mm256_cvtepu16_epi32(halves);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fff)),
                                         _mm256_set1_epi32(0x7c00));
  const __m256i signalling = _mm256_andnot_si256(_mm256_slli_epi32(bits, 13),
                                                 _mm256_set1_epi32(0x400000));
  return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_and_si256(nan, signalling),
                                                 _mm256_castps_si256(_mm256_cvtph_ps(halves))));
}

__m128i load8(const uint16_t* at) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)); }
void store8(uint16_t* at, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(at), v); }

// Eight elements at a time, the rest by codec_loops.h's loop.
void encodeHalf(const float* x, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) store8(out + i, halvesOf(_mm256_loadu_ps(x + i)));
  wireEncodeLoop<Half>(x + i, out + i, n - i);
}

void decodeHalf(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, floatsOf(load8(in + i)));
  wireDecodeLoop<Half>(in + i, out + i, n - i);
}

// float(y) + g, as wireAccumulateLoop adds. A NaN's quiet bit does not reach the result
// (halvesOf sends every NaN as sign | 0x7e00, and a NaN operand's sign does not depend on
// it), so the plain conversion serves.
void accumulateHalf(const uint16_t* y, const float* g, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 sum = _mm256_add_ps(_mm256_cvtph_ps(load8(y + i)), _mm256_loadu_ps(g + i));
    store8(out + i, halvesOf(sum));
  }
  wireAccumulateLoop<Half>(y + i, g + i, out + i, n - i);
}

}  // namespace

constinit const WireKernels kFp16Avx2 = {encodeHalf, decodeHalf, accumulateHalf};
constinit const WireKernels kBf16Avx2 = wireLoops<BFloat16>();
constinit const Int8Kernels kInt8Avx2 = int8Loops();

}  // namespace cerar::codec
