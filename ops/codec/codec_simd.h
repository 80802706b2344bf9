// The codec's hot loops per instruction set: the x86-64-v2 baseline, AVX2 with F16C, AVX-512;
// the codec's entry points (codec.h, wire.h) run the table of the widest the CPU supports,
// picked once. Every table gives the same bits on every input (tests/cpp/codec_simd_test.cc):
// the loops compute each element by the same operations in the same order, without FMA
// contraction (codec_loops.h). The one freedom, as before: an add of two NaNs returns one of
// them, and which one is the compiler's choice of operand order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cerar::codec {

// A float dtype's loops over elements [0, n) (the semantics of codec.h).
template <typename T>
struct FloatKernels {
  void (*add)(const T* y, const T* g, T* out, size_t n);  // out = y + g
  void (*addInPlace)(const T* y, T* out, size_t n);       // out = y + out
  // store = y (if not null); msg = y + eps * g below gLength, y + 0 beyond.
  void (*encode)(T eps, const T* y, const T* g, size_t gLength, T* store, T* msg, size_t n);
  void (*decode)(T eps, const T* y, const T* previous, T* out, size_t n);  // (y-prev)/eps + out
};

// A 16-bit wire's casts (the semantics of wire.h).
struct WireKernels {
  void (*encode)(const float* x, uint16_t* out, size_t n);
  void (*decode)(const uint16_t* in, float* out, size_t n);
  void (*accumulate)(const uint16_t* y, const float* g, uint16_t* out, size_t n);
};

// The int8 wire's messages (the semantics of int8_wire.h).
struct Int8Kernels {
  void (*encode)(const float* x, std::byte* msg, size_t n);
  void (*decode)(const std::byte* msg, float* out, size_t n);
  void (*accumulate)(const std::byte* y, const float* g, std::byte* out, size_t n);
};

struct Kernels {
  FloatKernels<float> f32;
  FloatKernels<double> f64;
  WireKernels fp16;
  WireKernels bf16;
  Int8Kernels int8;
};

enum class Isa : uint8_t { kBaseline, kAvx2, kAvx512 };
const char* isaName(Isa isa);  // "x86-64-v2" | "avx2+f16c" | "avx512"
// Whether this CPU (and its OS) runs the table built for `isa`.
bool isaSupported(Isa isa);
// The table built for `isa`; throws InvalidArgumentError when this CPU cannot run it.
const Kernels& kernelsFor(Isa isa);
// The widest instruction set this CPU supports, and its table: what the codec runs.
Isa activeIsa();
const Kernels& kernels();

// The wide casts (codec_simd_avx2.cc, codec_simd_avx512.cc), for kernelsFor alone.
extern const WireKernels kFp16Avx2, kBf16Avx2, kBf16Avx512;
extern const Int8Kernels kInt8Avx2, kInt8Avx512;

}  // namespace cerar::codec
