#include "core/execution/scaling.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "ops/codec/half.h"
#include "ops/codec/range.h"
#include "common/error.h"

namespace cerar {
namespace {

// Copies of at least this many bytes stream their stores past the cache, as memmove does for
// sizes like these: a fusion buffer that large is not in cache when the all-reduce reads it,
// and normal stores would first read every destination line.
constexpr size_t kStreamingBytes = size_t(4) << 20;

#if defined(__x86_64__)
// A plain copy with non-temporal stores and the range test on the way, 4 cache lines per step
// (the cost is instructions where ranks share cores: f32 keeps the maximum exponent field, one
// AND and one MAX per 32 bytes; f64, lacking a 64-bit MAX in AVX2, ORs term()); false without
// AVX2 or where the destination cannot be aligned to 32 bytes.
template <typename T>
__attribute__((target("avx2"))) bool streamingCopyAvx2(
    const T* in, T* out, size_t n, const codec::RangeCheck<T>& check,
    typename codec::RangeCheck<T>::Bits& accumulated) {
  using Bits = typename codec::RangeCheck<T>::Bits;
  constexpr bool f32 = sizeof(T) == 4;
  if (reinterpret_cast<uintptr_t>(out) % sizeof(T) != 0) return false;
  size_t i = 0;
  for (; i < n && reinterpret_cast<uintptr_t>(out + i) % 32 != 0; ++i) {
    out[i] = in[i];
    accumulated |= check.term(in[i]);
  }
  const Bits exponent = codec::RangeCheck<T>::kExponent;
  const __m256i mask = f32 ? _mm256_set1_epi32(int32_t(exponent))
                           : _mm256_set1_epi64x(int64_t(exponent));
  const __m256i bias = f32 ? _mm256_set1_epi32(int32_t(check.bias()))
                           : _mm256_set1_epi64x(int64_t(check.bias()));
  __m256i lanes[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  constexpr size_t kLane = 32 / sizeof(T), kStep = 8 * kLane;  // 4 cache lines
  for (; i + kStep <= n; i += kStep) {
#pragma GCC unroll 8
    for (size_t v = 0; v < 8; ++v) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + v * kLane));
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i + v * kLane), x);
      const __m256i field = _mm256_and_si256(x, mask);
      if constexpr (f32) {
        lanes[v % 2] = _mm256_max_epu32(lanes[v % 2], field);
      } else {
        lanes[v % 2] = _mm256_or_si256(lanes[v % 2], _mm256_add_epi64(field, bias));
      }
    }
  }
  _mm_sfence();
  Bits lane[2 * kLane];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lane), lanes[0]);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lane + kLane), lanes[1]);
  for (Bits b : lane) accumulated |= f32 ? check.flagged(b) : b;
  for (; i < n; ++i) {
    out[i] = in[i];
    accumulated |= check.term(in[i]);
  }
  return true;
}

template <typename T>
bool streamingCopy(const T* in, T* out, size_t n, const codec::RangeCheck<T>& check,
                   typename codec::RangeCheck<T>::Bits& accumulated) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2 && streamingCopyAvx2(in, out, n, check, accumulated);
}
#else
template <typename T>
bool streamingCopy(const T*, T*, size_t, const codec::RangeCheck<T>&,
                   typename codec::RangeCheck<T>::Bits&) {
  return false;
}
#endif

// One pass: read, scale (or not), write, and accumulate the range test of what is written.
template <typename T>
bool scaleChecked(const void* src, void* dst, size_t n, double factor, int N) {
  const T* in = static_cast<const T*>(src);
  T* out = static_cast<T*>(dst);
  const codec::RangeCheck<T> check(N);
  typename codec::RangeCheck<T>::Bits accumulated = 0;
  if (factor == 1.0 && src == dst) {
    for (size_t i = 0; i < n; ++i) accumulated |= check.term(in[i]);
  } else if (factor == 1.0 && n * sizeof(T) >= kStreamingBytes &&
             streamingCopy(in, out, n, check, accumulated)) {
  } else if (factor == 1.0) {
    for (size_t i = 0; i < n; ++i) {
      out[i] = in[i];
      accumulated |= check.term(in[i]);
    }
  } else {
    const T f = static_cast<T>(factor);
    for (size_t i = 0; i < n; ++i) {
      out[i] = in[i] * f;
      accumulated |= check.term(out[i]);
    }
  }
  return codec::RangeCheck<T>::beyond(accumulated);
}

template <typename T>
void fill(void* dst, size_t n, T value) {
  std::fill_n(static_cast<T*>(dst), n, value);
}

template <typename T>
T extreme(ReduceOp op) {
  if constexpr (std::numeric_limits<T>::has_infinity) {
    return op == ReduceOp::kMin ? std::numeric_limits<T>::infinity()
                                : -std::numeric_limits<T>::infinity();
  } else {
    return op == ReduceOp::kMin ? std::numeric_limits<T>::max()
                                : std::numeric_limits<T>::lowest();
  }
}

}  // namespace

bool scaledCopyChecked(DType dtype, const void* src, void* dst, size_t n, double factor,
                       int N) {
  switch (dtype) {
    case DType::kFloat32: return scaleChecked<float>(src, dst, n, factor, N);
    case DType::kFloat64: return scaleChecked<double>(src, dst, n, factor, N);
    default: throw Error(detail::concat("range check: CERAR has no ", dtypeName(dtype)));
  }
}

void fillIdentity(DType dtype, ReduceOp op, void* dst, size_t n) {
  if (n == 0) return;
  if (op == ReduceOp::kSum) {
    std::memset(dst, 0, n * dtypeSize(dtype));  // all-zero bits are 0 in every dtype here
    return;
  }
  switch (dtype) {
    case DType::kFloat32: return fill<float>(dst, n, extreme<float>(op));
    case DType::kFloat64: return fill<double>(dst, n, extreme<double>(op));
    case DType::kFloat16:
      return fill<codec::Half>(dst, n, codec::fromFloat<codec::Half>(extreme<float>(op)));
    case DType::kBFloat16:
      return fill<codec::BFloat16>(dst, n,
                                   codec::fromFloat<codec::BFloat16>(extreme<float>(op)));
    case DType::kInt32: return fill<int32_t>(dst, n, extreme<int32_t>(op));
    case DType::kInt64: return fill<int64_t>(dst, n, extreme<int64_t>(op));
    case DType::kUInt8: return fill<uint8_t>(dst, n, extreme<uint8_t>(op));
  }
}

}  // namespace cerar
