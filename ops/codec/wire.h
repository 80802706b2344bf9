// Wire formats for the exact ring (docs/wires.md): float32 data travels as IEEE half or
// bfloat16 (16 bits), or as int8 codes with a scale per block (ops/codec/int8_wire.h), and every
// hop adds in float32. The 16-bit casts round to nearest even; a value beyond the format's range
// becomes inf, as the exact ring would carry it; NaN stays NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace cerar {

enum class Wire : uint8_t { kNone, kFloat16, kBFloat16, kInt8 };
const char* wireName(Wire wire);   // "none" | "fp16" | "bf16" | "int8"
Wire parseWire(const std::string& name);  // throws kInvalidArgument on anything else
// The one rule of what a lossy wire carries: a sum of float32 data, and on the int8 wire also of
// float16 and bfloat16 data (over a float32 copy; a 16-bit wire would send what the data's own
// ring sends). kNone carries everything. The data must be in host memory as well: the caller's.
bool wireCarries(Wire wire, DType dtype, ReduceOp op);
// Bytes of one element on the wire: 2 for a 16-bit wire, 1 for int8 (plus its block scales),
// else `elementBytes`.
size_t wireElementBytes(Wire wire, size_t elementBytes);

// Buffers kept between runs: two send and receive buffers and a float scratch.
struct WireBuffers {
  std::vector<std::byte> send[2];
  std::vector<std::byte> recv[2];
  std::vector<float> scratch;
  std::vector<float> decoded;  // error feedback: a segment's message as decoded
};

namespace codec {

// wire[i] = cast(x[i]), i < n.
void encodeWire(Wire wire, const float* x, uint16_t* out, size_t n);
// out[i] = float(wire[i]) (exact).
void decodeWire(Wire wire, const uint16_t* in, float* out, size_t n);
// out[i] = cast(float(y[i]) + g[i]): one hop of the reduce-scatter, the add in float32.
void accumulateWire(Wire wire, const uint16_t* y, const float* g, uint16_t* out, size_t n);

// The guard of an fp16 wire chosen by the error budget (core/policy/error_budget.h), from one rank's
// buffer: bit 0, some |x| >= 2^15 / N or inf (N such values sum below 2^15, and N roundings
// up by 1 + 2^-11 keep partial sums below fp16's 65504 for N < 1400: no overflow to inf);
// bit 1, some |x| >= 2^-10 (not all in or near fp16's subnormal range, where a cast errs by
// 2^-25 absolute). NaN counts for neither. Ranks OR the bits; fp16GuardPasses says whether
// the fp16 wire may run.
uint8_t fp16GuardBits(const float* x, size_t n, int N);
bool fp16GuardPasses(uint8_t orOverRanks);

}  // namespace codec
}  // namespace cerar
