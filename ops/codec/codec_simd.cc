// The baseline table (built for x86-64-v2 like the rest of the codec), the choice of table, and
// the 16-bit wires' casts (wire.h), which run it.
#include "ops/codec/codec_simd.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "ops/codec/codec_loops.h"
#include "ops/codec/wire.h"
#include "common/error.h"

namespace cerar::codec {

const char* isaName(Isa isa) {
  switch (isa) {
    case Isa::kBaseline: return "x86-64-v2";
    case Isa::kAvx2: return "avx2+f16c";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

#if defined(__x86_64__)
namespace {
// F16C by CPUID (leaf 1, ECX bit 29): not every compiler's __builtin_cpu_supports knows it.
bool hasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
}  // namespace
#endif

bool isaSupported(Isa isa) {
#if defined(__x86_64__)
  // The compiler runtime's probe also asks the OS (XGETBV) whether it saves the wide
  // registers; F16C's are AVX's.
  switch (isa) {
    case Isa::kBaseline: return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && hasF16c();
    case Isa::kAvx512:
      return isaSupported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return isa == Isa::kBaseline;
#endif
}

const Kernels& kernelsFor(Isa isa) {
  CERAR_CHECK_ARGUMENT(isaSupported(isa), "codec: this CPU cannot run the ", isaName(isa),
                       " loops");
  // Per routine, the variant that measured fastest on cache-resident segments (bench/README.md,
  // "Codec throughput"): the float loops and bfloat16's decode (a shift) are the baseline's,
  // bound by the caches at SSE width already; wider loads there only split more cache lines.
  static constexpr Kernels baseline = loopKernels();
  auto bf16 = [](const WireKernels& wide) {
    return WireKernels{wide.encode, baseline.bf16.decode, wide.accumulate};
  };
  // int8: the wide builds encode (a divide per code) faster; its decode (a widening multiply)
  // measured fastest at x86-64-v2, as bfloat16's.
  auto int8 = [](const Int8Kernels& wide) {
    return Int8Kernels{wide.encode, baseline.int8.decode, wide.accumulate};
  };
  static const Kernels avx2{baseline.f32, baseline.f64, kFp16Avx2, bf16(kBf16Avx2),
                            int8(kInt8Avx2)};
  static const Kernels avx512{baseline.f32, baseline.f64, kFp16Avx2, bf16(kBf16Avx512),
                              int8(kInt8Avx512)};
  switch (isa) {
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512: return avx512;
    case Isa::kBaseline: break;
  }
  return baseline;
}

Isa activeIsa() {
  static const Isa widest = isaSupported(Isa::kAvx512) ? Isa::kAvx512
                            : isaSupported(Isa::kAvx2) ? Isa::kAvx2
                                                       : Isa::kBaseline;
  return widest;
}

const Kernels& kernels() {
  static const Kernels& active = kernelsFor(activeIsa());
  return active;
}

namespace {

const WireKernels& wireKernels(Wire wire) {
  CERAR_ENFORCE(wire == Wire::kFloat16 || wire == Wire::kBFloat16, "no 16-bit wire: ",
                wireName(wire));
  return wire == Wire::kFloat16 ? kernels().fp16 : kernels().bf16;
}

}  // namespace

void encodeWire(Wire wire, const float* x, uint16_t* out, size_t n) {
  wireKernels(wire).encode(x, out, n);
}

void decodeWire(Wire wire, const uint16_t* in, float* out, size_t n) {
  wireKernels(wire).decode(in, out, n);
}

void accumulateWire(Wire wire, const uint16_t* y, const float* g, uint16_t* out, size_t n) {
  wireKernels(wire).accumulate(y, g, out, n);
}

}  // namespace cerar::codec
