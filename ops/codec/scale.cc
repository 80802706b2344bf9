#include "ops/codec/scale.h"

#include <cstring>

#include "ops/codec/half.h"
#include "common/error.h"

namespace cerar {
namespace {

template <typename T>
void scale(const void* src, void* dst, size_t n, double factor) {
  const T* in = static_cast<const T*>(src);
  T* out = static_cast<T*>(dst);
  const T f = static_cast<T>(factor);
  for (size_t i = 0; i < n; ++i) out[i] = in[i] * f;
}

template <typename H>
void scaleHalf(const void* src, void* dst, size_t n, double factor) {
  const H* in = static_cast<const H*>(src);
  H* out = static_cast<H*>(dst);
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < n; ++i) out[i] = codec::fromFloat<H>(codec::toFloat(in[i]) * f);
}

}  // namespace

bool isFloatDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

void scaledCopy(DType dtype, const void* src, void* dst, size_t n, double factor) {
  if (n == 0) return;
  if (factor == 1.0) {
    if (src != dst) std::memmove(dst, src, n * dtypeSize(dtype));
    return;
  }
  switch (dtype) {
    case DType::kFloat32: return scale<float>(src, dst, n, factor);
    case DType::kFloat64: return scale<double>(src, dst, n, factor);
    case DType::kFloat16: return scaleHalf<codec::Half>(src, dst, n, factor);
    case DType::kBFloat16: return scaleHalf<codec::BFloat16>(src, dst, n, factor);
    default:
      throw InvalidArgumentError(
          detail::concat("cannot scale ", dtypeName(dtype), " tensors by ", factor));
  }
}

}  // namespace cerar
