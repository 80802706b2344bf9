#include "ops/codec/range.h"

#include "ops/common/error.h"

namespace cerar::codec {
namespace {

template <typename T>
bool beyond(const T* data, size_t n, int N) {
  const RangeCheck<T> check(N);
  typename RangeCheck<T>::Bits accumulated = 0;
  for (size_t i = 0; i < n; ++i) accumulated |= check.term(data[i]);
  return RangeCheck<T>::beyond(accumulated);
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
