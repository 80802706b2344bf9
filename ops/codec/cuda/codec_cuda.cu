// The codec kernels: one fused pass per round action, 16-byte loads where every pointer allows.
#include "ops/codec/cuda/codec_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/codec/cuda/codec_cuda.cuh"
#include "common/error.h"

namespace cerar::cuda {
namespace {

using dev::Op;

// V elements of T in one 16-byte load.
template <typename T>
union Pack {
  static constexpr int V = 16 / sizeof(T);
  uint4 raw;
  T v[V];
};
template <typename T>
__device__ inline Pack<T> load(const T* p, size_t j) {
  Pack<T> pack;
  pack.raw = reinterpret_cast<const uint4*>(p)[j];
  return pack;
}
template <typename T>
__device__ inline void save(T* p, size_t j, const Pack<T>& pack) {
  reinterpret_cast<uint4*>(p)[j] = pack.raw;
}

template <typename T, Op op>
struct Accumulate {  // msg = y (op) g
  const T* y;
  const T* g;
  T* msg;
  __device__ void scalar(size_t i) const { msg[i] = dev::combine<op>(y[i], g[i]); }
  __device__ void vector(size_t j) const {
    Pack<T> a = load(y, j), b = load(g, j);
#pragma unroll
    for (int k = 0; k < Pack<T>::V; ++k) a.v[k] = dev::combine<op>(a.v[k], b.v[k]);
    save(msg, j, a);
  }
};

template <typename T, Op op>
struct FinishFirst {  // out = y (op) out
  const T* y;
  T* out;
  __device__ void scalar(size_t i) const { out[i] = dev::combine<op>(y[i], out[i]); }
  __device__ void vector(size_t j) const {
    Pack<T> a = load(y, j), b = load(out, j);
#pragma unroll
    for (int k = 0; k < Pack<T>::V; ++k) b.v[k] = dev::combine<op>(a.v[k], b.v[k]);
    save(out, j, b);
  }
};

template <typename T>
struct FinishDecode {  // out = (y - previous) / eps + out
  T eps;
  const T* y;
  const T* previous;
  T* out;
  __device__ void scalar(size_t i) const { out[i] = dev::decode(eps, y[i], previous[i], out[i]); }
  __device__ void vector(size_t j) const {
    Pack<T> a = load(y, j), p = load(previous, j), o = load(out, j);
#pragma unroll
    for (int k = 0; k < Pack<T>::V; ++k) o.v[k] = dev::decode(eps, a.v[k], p.v[k], o.v[k]);
    save(out, j, o);
  }
};

template <typename T>
struct StoreAndEncode {  // store = y; msg = y + eps * g (g zero beyond gLength)
  T eps;
  const T* y;
  const T* g;
  size_t gLength;
  T* store;  // may be null
  T* msg;
  __device__ void scalar(size_t i) const {
    const T v = y[i];
    if (store) store[i] = v;
    msg[i] = i < gLength ? dev::encode(eps, v, g[i]) : dev::pad(v);
  }
  __device__ void vector(size_t j) const {
    constexpr int V = Pack<T>::V;
    const Pack<T> a = load(y, j);
    if (store) save(store, j, a);
    Pack<T> m;
    if ((j + 1) * V <= gLength) {  // never load g past its end
      const Pack<T> b = load(g, j);
#pragma unroll
      for (int k = 0; k < V; ++k) m.v[k] = dev::encode(eps, a.v[k], b.v[k]);
    } else {
      for (int k = 0; k < V; ++k) {
        const size_t e = j * V + k;
        m.v[k] = e < gLength ? dev::encode(eps, a.v[k], g[e]) : dev::pad(a.v[k]);
      }
    }
    save(msg, j, m);
  }
};

template <typename T>
struct Scale {  // data *= factor (half types through float)
  using Wide = std::conditional_t<std::is_same_v<T, double>, double, float>;
  Wide factor;
  T* data;
  __device__ T one(T x) const {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      return dev::mul(x, factor);
    } else {
      T out;
      dev::fromFloat(dev::mul(dev::toFloat(x), factor), out);
      return out;
    }
  }
  __device__ void scalar(size_t i) const { data[i] = one(data[i]); }
  __device__ void vector(size_t j) const {
    Pack<T> a = load(data, j);
#pragma unroll
    for (int k = 0; k < Pack<T>::V; ++k) a.v[k] = one(a.v[k]);
    save(data, j, a);
  }
};

template <typename T>
struct Fill {  // data = value
  T value;
  T* data;
  __device__ void scalar(size_t i) const { data[i] = value; }
  __device__ void vector(size_t j) const {
    Pack<T> a;
#pragma unroll
    for (int k = 0; k < Pack<T>::V; ++k) a.v[k] = value;
    save(data, j, a);
  }
};

// Grid-stride: whole 16-byte vectors first (when `vectorised`), then the scalar tail.
template <typename T, typename F>
__global__ void elementwise(F f, size_t n, bool vectorised) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t vectors = vectorised ? n / Pack<T>::V : 0;
  for (size_t j = tid; j < vectors; j += stride) f.vector(j);
  for (size_t i = vectors * Pack<T>::V + tid; i < n; i += stride) f.scalar(i);
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(detail::concat("CUDA ", what, ": ", cudaGetErrorString(status)));
}

// Enough resident blocks to saturate memory; cached per device.
int maxBlocks() {
  static thread_local int device = -1, blocks = 0;
  int current = 0;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device) {
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, current), "attribute");
    device = current;
    blocks = std::max(1, sms) * 16;
  }
  return blocks;
}

bool aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

template <typename T, typename F>
void launch(const F& f, size_t n, bool vectorised, void* stream, const char* what) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const size_t work = vectorised ? n / Pack<T>::V + Pack<T>::V : n;
  const int blocks = int(std::min<size_t>((work + kThreads - 1) / kThreads, maxBlocks()));
  elementwise<T><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(f, n, vectorised);
  check(cudaGetLastError(), what);
}

// Calls fn(T{}, op-constant) for every dtype and op, as codec.cc's withCombine.
template <typename Fn>
void withCombine(DType dtype, ReduceOp op, Fn&& fn) {
  auto typed = [&](auto zero) {
    using T = decltype(zero);
    switch (op) {
      case ReduceOp::kSum: return fn(T{}, std::integral_constant<Op, Op::kSum>{});
      case ReduceOp::kMin: return fn(T{}, std::integral_constant<Op, Op::kMin>{});
      case ReduceOp::kMax: return fn(T{}, std::integral_constant<Op, Op::kMax>{});
    }
    throw Error("codec (CUDA): unknown reduce op");
  };
  switch (dtype) {
    case DType::kFloat32: return typed(float{});
    case DType::kFloat64: return typed(double{});
    case DType::kInt32: return typed(int32_t{});
    case DType::kInt64: return typed(int64_t{});
    case DType::kUInt8: return typed(uint8_t{});
    case DType::kFloat16: return typed(dev::Half{});
    case DType::kBFloat16: return typed(dev::BFloat16{});
  }
  throw Error("codec (CUDA): unknown dtype");
}

template <typename Fn>
void withFloating(DType dtype, const char* what, Fn&& fn) {
  if (dtype == DType::kFloat32) return fn(float{});
  if (dtype == DType::kFloat64) return fn(double{});
  throw InvalidArgumentError(detail::concat("codec (CUDA): ", what,
                                            " supports f32 and f64 only, got ",
                             dtypeName(dtype)));
}

// Batched copy: blockIdx.y walks the segments, blockIdx.x strides within one.
__global__ void copySegments(const CopySegment* segments, int count) {
  for (int s = blockIdx.y; s < count; s += gridDim.y) {
    const auto* src = static_cast<const unsigned char*>(segments[s].src);
    auto* dst = static_cast<unsigned char*>(segments[s].dst);
    const size_t bytes = segments[s].bytes;
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    size_t head = bytes, body = 0;  // bytes before the 16-byte body, then whole vectors
    const uintptr_t misalign = reinterpret_cast<uintptr_t>(src) % 16;
    if (misalign == reinterpret_cast<uintptr_t>(dst) % 16) {
      const size_t toAlign = (16 - misalign) % 16;
      head = bytes < toAlign ? bytes : toAlign;
      body = (bytes - head) / 16;
    }
    for (size_t i = tid; i < head; i += stride) dst[i] = src[i];
    const auto* src16 = reinterpret_cast<const uint4*>(src + head);
    auto* dst16 = reinterpret_cast<uint4*>(dst + head);
    for (size_t j = tid; j < body; j += stride) dst16[j] = src16[j];
    for (size_t i = head + body * 16 + tid; i < bytes; i += stride) dst[i] = src[i];
  }
}

// The range test: each thread ORs the exponent terms of its elements (bits of type B, the
// float's width), then one atomicOr per thread that saw a value at or beyond the limit.
template <typename B>
__global__ void rangeTestKernel(const B* data, size_t n, B exponentMask, B bias,
                                unsigned* flag) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  B accumulated = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    accumulated |= (data[i] & exponentMask) + bias;
  if (accumulated >> (8 * sizeof(B) - 1)) atomicOr(flag, 1u);
}

}  // namespace

void rangeTest(DType dtype, const void* data, size_t n, unsigned exponentLimit, unsigned* flag,
               void* stream) {
  if (n == 0) return;
  auto run = [&](auto zero, int mantissaBits, auto ones) {
    using B = decltype(zero);
    const B sign = B(1) << (8 * sizeof(B) - 1);
    constexpr int kThreads = 256;
    const int blocks = int(std::min<size_t>((n + kThreads - 1) / kThreads, maxBlocks()));
    rangeTestKernel<B><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const B*>(data), n, B(ones) << mantissaBits,
        sign - (B(exponentLimit) << mantissaBits), flag);
    check(cudaGetLastError(), "rangeTest");
  };
  if (dtype == DType::kFloat32) return run(uint32_t{}, 23, 0xffu);
  if (dtype == DType::kFloat64) return run(uint64_t{}, 52, 0x7ffu);
  throw Error(detail::concat("range test (CUDA): CERAR has no ", dtypeName(dtype)));
}

void accumulate(DType dtype, ReduceOp op, const void* y, const void* g, void* msg, size_t n,
                void* stream) {
  withCombine(dtype, op, [&](auto tag, auto opTag) {
    using T = decltype(tag);
    Accumulate<T, decltype(opTag)::value> f{static_cast<const T*>(y), static_cast<const T*>(g),
                                            static_cast<T*>(msg)};
    launch<T>(f, n, aligned16({y, g, msg}), stream, "accumulate");
  });
}

void finishFirst(DType dtype, ReduceOp op, const void* y, void* out, size_t n, void* stream) {
  withCombine(dtype, op, [&](auto tag, auto opTag) {
    using T = decltype(tag);
    FinishFirst<T, decltype(opTag)::value> f{static_cast<const T*>(y), static_cast<T*>(out)};
    launch<T>(f, n, aligned16({y, out}), stream, "finishFirst");
  });
}

void finishDecode(DType dtype, double eps, const void* y, const void* previous, void* out,
                  size_t n, void* stream) {
  withFloating(dtype, "decode", [&](auto tag) {
    using T = decltype(tag);
    FinishDecode<T> f{static_cast<T>(eps), static_cast<const T*>(y),
                      static_cast<const T*>(previous), static_cast<T*>(out)};
    launch<T>(f, n, aligned16({y, previous, out}), stream, "finishDecode");
  });
}

void storeAndEncode(DType dtype, double eps, const void* y, const void* g, size_t gLength,
                    void* storeTo, void* msg, size_t n, void* stream) {
  withFloating(dtype, "encode", [&](auto tag) {
    using T = decltype(tag);
    StoreAndEncode<T> f{static_cast<T>(eps), static_cast<const T*>(y), static_cast<const T*>(g),
                        gLength, static_cast<T*>(storeTo), static_cast<T*>(msg)};
    launch<T>(f, n, aligned16({y, g, storeTo, msg}), stream, "storeAndEncode");
  });
}

void store(DType dtype, const void* y, void* out, size_t n, void* stream) {
  if (n == 0 || y == out) return;
  check(cudaMemcpyAsync(out, y, n * dtypeSize(dtype), cudaMemcpyDeviceToDevice,
                        static_cast<cudaStream_t>(stream)),
        "store");
}

void scale(DType dtype, void* data, size_t n, double factor, void* stream) {
  if (n == 0 || factor == 1.0) return;
  auto run = [&](auto tag, auto wide) {
    using T = decltype(tag);
    Scale<T> f{static_cast<decltype(wide)>(factor), static_cast<T*>(data)};
    launch<T>(f, n, aligned16({data}), stream, "scale");
  };
  switch (dtype) {
    case DType::kFloat32: return run(float{}, float{});
    case DType::kFloat64: return run(double{}, double{});
    case DType::kFloat16: return run(dev::Half{}, float{});
    case DType::kBFloat16: return run(dev::BFloat16{}, float{});
    default:
      throw InvalidArgumentError(
          detail::concat("cannot scale ", dtypeName(dtype), " tensors by ", factor));
  }
}

void fillIdentity(DType dtype, ReduceOp op, void* data, size_t n, void* stream) {
  if (n == 0) return;
  if (op == ReduceOp::kSum) {  // all-zero bits are 0 in every dtype here
    check(cudaMemsetAsync(data, 0, n * dtypeSize(dtype), static_cast<cudaStream_t>(stream)),
          "fillIdentity");
    return;
  }
  const bool min = op == ReduceOp::kMin;
  auto run = [&](auto value) {
    using T = decltype(value);
    launch<T>(Fill<T>{value, static_cast<T*>(data)}, n, aligned16({data}), stream,
              "fillIdentity");
  };
  switch (dtype) {
    case DType::kFloat32: return run(min ? HUGE_VALF : -HUGE_VALF);
    case DType::kFloat64: return run(min ? HUGE_VAL : -HUGE_VAL);
    case DType::kFloat16: return run(dev::Half{uint16_t(min ? 0x7c00 : 0xfc00)});
    case DType::kBFloat16: return run(dev::BFloat16{uint16_t(min ? 0x7f80 : 0xff80)});
    case DType::kInt32:
      return run(min ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int32_t>::lowest());
    case DType::kInt64:
      return run(min ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::lowest());
    case DType::kUInt8: return run(min ? uint8_t(255) : uint8_t(0));
  }
}

void batchedCopy(const CopySegment* segments, int count, size_t maxBytes, void* stream) {
  if (count <= 0) return;
  constexpr int kThreads = 256;
  const int perSegment = int(std::clamp<size_t>(maxBytes / (kThreads * 64), 1, 1024));
  const dim3 grid(perSegment, std::min(count, 65535));
  copySegments<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(segments, count);
  check(cudaGetLastError(), "batchedCopy");
}

int deviceCount(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error for later calls
    if (why) *why = cudaGetErrorString(status);
    return 0;
  }
  if (count == 0 && why) *why = "the CUDA runtime reports 0 devices";
  return count;
}

}  // namespace cerar::cuda
