#include "ops/codec/codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/codec/codec_simd.h"
#include "ops/codec/half.h"
#include "common/error.h"

namespace cerar::codec {
namespace {

// Plain loops over restrict-qualified pointers: the compiler vectorises them, and with
// contraction off each element is computed exactly as written.
template <typename T, typename Combine>
void combineLoop(const T* __restrict y, const T* __restrict g, T* __restrict out, size_t n,
                 Combine combine) {
  for (size_t e = 0; e < n; ++e) out[e] = combine(y[e], g[e]);
}

// In place: out may alias nothing but itself.
template <typename T, typename Combine>
void combineInPlace(const T* __restrict y, T* __restrict out, size_t n, Combine combine) {
  for (size_t e = 0; e < n; ++e) out[e] = combine(y[e], out[e]);
}

template <typename T>
struct Sum {
  T operator()(T a, T b) const { return a + b; }
};
template <typename T>
struct Min {
  T operator()(T a, T b) const { return std::min(a, b); }
};
template <typename T>
struct Max {
  T operator()(T a, T b) const { return std::max(a, b); }
};

// Half types are reduced in float and rounded back after every step, as one element would be
// on a device that stores halves.
template <typename H>
struct Widened {
  ReduceOp op;
  H operator()(H a, H b) const {
    const float fa = toFloat(a), fb = toFloat(b);
    float r = op == ReduceOp::kSum ? fa + fb : op == ReduceOp::kMin ? std::min(fa, fb)
                                                                   : std::max(fa, fb);
    return fromFloat<H>(r);
  }
};

// Calls fn with a typed tag for every dtype, combining with `op`.
template <typename Fn>
void withCombine(DType dtype, ReduceOp op, Fn&& fn) {
  auto typed = [&](auto zero) {
    using T = decltype(zero);
    switch (op) {
      case ReduceOp::kSum: fn(T{}, Sum<T>{}); return;
      case ReduceOp::kMin: fn(T{}, Min<T>{}); return;
      case ReduceOp::kMax: fn(T{}, Max<T>{}); return;
    }
  };
  switch (dtype) {
    case DType::kFloat32: typed(float{}); return;
    case DType::kFloat64: typed(double{}); return;
    case DType::kInt32: typed(int32_t{}); return;
    case DType::kInt64: typed(int64_t{}); return;
    case DType::kUInt8: typed(uint8_t{}); return;
    case DType::kFloat16: fn(Half{}, Widened<Half>{op}); return;
    case DType::kBFloat16: fn(BFloat16{}, Widened<BFloat16>{op}); return;
  }
  throw Error("codec: unknown dtype");
}

// Calls fn with a float or double tag; CERAR's encode/decode exist only for those.
template <typename Fn>
void withFloating(DType dtype, const char* what, Fn&& fn) {
  if (dtype == DType::kFloat32) return fn(float{});
  if (dtype == DType::kFloat64) return fn(double{});
  throw InvalidArgumentError(detail::concat("codec: ", what, " supports f32 and f64 only, got ",
                             dtypeName(dtype)));
}

// The float sums, encode and decode run the widest loops this CPU has (codec_simd.h).
template <typename T>
const FloatKernels<T>& floatKernels() {
  if constexpr (std::is_same_v<T, float>) return kernels().f32;
  else return kernels().f64;
}

template <typename T>
constexpr bool kHasKernels = std::is_same_v<T, float> || std::is_same_v<T, double>;

}  // namespace

void accumulate(DType dtype, ReduceOp op, const void* y, const void* g, void* msg, size_t n) {
  withCombine(dtype, op, [&](auto tag, auto combine) {
    using T = decltype(tag);
    if constexpr (kHasKernels<T> && std::is_same_v<decltype(combine), Sum<T>>) {
      return floatKernels<T>().add(static_cast<const T*>(y), static_cast<const T*>(g),
                                   static_cast<T*>(msg), n);
    }
    combineLoop(static_cast<const T*>(y), static_cast<const T*>(g), static_cast<T*>(msg), n,
                combine);
  });
}

void finishFirst(DType dtype, ReduceOp op, const void* y, void* out, size_t n) {
  withCombine(dtype, op, [&](auto tag, auto combine) {
    using T = decltype(tag);
    if constexpr (kHasKernels<T> && std::is_same_v<decltype(combine), Sum<T>>) {
      return floatKernels<T>().addInPlace(static_cast<const T*>(y), static_cast<T*>(out), n);
    }
    combineInPlace(static_cast<const T*>(y), static_cast<T*>(out), n, combine);
  });
}

void finishDecode(DType dtype, double eps, const void* y, const void* previous, void* out,
                  size_t n) {
  withFloating(dtype, "decode", [&](auto tag) {
    using T = decltype(tag);
    floatKernels<T>().decode(static_cast<T>(eps), static_cast<const T*>(y),
                             static_cast<const T*>(previous), static_cast<T*>(out), n);
  });
}

void storeAndEncode(DType dtype, double eps, const void* y, const void* g, size_t gLength,
                    void* storeTo, void* msg, size_t n) {
  withFloating(dtype, "encode", [&](auto tag) {
    using T = decltype(tag);
    floatKernels<T>().encode(static_cast<T>(eps), static_cast<const T*>(y),
                             static_cast<const T*>(g), gLength, static_cast<T*>(storeTo),
                             static_cast<T*>(msg), n);
  });
}

void store(DType dtype, const void* y, void* out, size_t n) {
  if (n > 0) std::memcpy(out, y, n * dtypeSize(dtype));
}

}  // namespace cerar::codec
