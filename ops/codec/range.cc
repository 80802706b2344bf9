#include "ops/codec/range.h"

#include "common/error.h"

namespace cerar::codec {
namespace {

template <typename T>
typename RangeCheck<T>::Bits terms(const T* data, size_t n, const RangeCheck<T>& check) {
  typename RangeCheck<T>::Bits accumulated = 0;
  for (size_t i = 0; i < n; ++i) accumulated |= check.term(data[i]);
  return accumulated;
}

#if defined(__x86_64__)
// The same loop compiled for AVX2: half the instructions per byte, which is what a scan costs
// where ranks share cores (the loop is otherwise memory-bound).
template <typename T>
__attribute__((target("avx2"))) typename RangeCheck<T>::Bits termsAvx2(
    const T* data, size_t n, const RangeCheck<T>& check) {
  typename RangeCheck<T>::Bits accumulated = 0;
  for (size_t i = 0; i < n; ++i) accumulated |= check.term(data[i]);
  return accumulated;
}
#endif

template <typename T>
bool beyond(const T* data, size_t n, int N) {
  const RangeCheck<T> check(N);
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return RangeCheck<T>::beyond(termsAvx2(data, n, check));
#endif
  return RangeCheck<T>::beyond(terms(data, n, check));
}

}  // namespace

int rangeGuardBits(int N) {
  int bits = 1;
  while ((1LL << (bits - 1)) < N) ++bits;
  return bits;
}

unsigned rangeExponentLimit(DType dtype, int N) {
  const unsigned ones = dtype == DType::kFloat64 ? 0x7ff : 0xff;
  return ones - unsigned(rangeGuardBits(N));
}

bool beyondCerarRange(DType dtype, const void* data, size_t n, int N) {
  switch (dtype) {
    case DType::kFloat32: return beyond(static_cast<const float*>(data), n, N);
    case DType::kFloat64: return beyond(static_cast<const double*>(data), n, N);
    default: throw Error(detail::concat("range check: CERAR has no ", dtypeName(dtype)));
  }
}

}  // namespace cerar::codec
