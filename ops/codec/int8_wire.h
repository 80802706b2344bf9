// The int8 wire (docs/wires.md, "8-bit wire"): float32 data travels as one signed byte per
// element with a float32 scale per block of kInt8Block elements, and every hop adds in float32.
// A block's scale is its largest magnitude / 127 (rounded to float32); an element's code is
// round-to-nearest-even(x / scale) in [-127, 127], its value code * scale (one float32
// multiply, so every rank decodes the same bits to the same value). A block holding a
// non-finite value has a NaN scale (every element decodes to NaN): the runtime sends only
// buffers whose ranks passed int8GuardBits, so that finite data stay finite.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cerar::codec {

// Elements per scale: 4 bytes of scale per 256 codes (1.6 % of the message). Measured
// (bench/int8_design.py): 256 gave 0.6 times the RMS error of 1024-element blocks (0.4 %) and
// 0.35 times that of 4096 (0.1 %) on the suite's data; the largest error is the same for all.
constexpr size_t kInt8Block = 256;

// Bytes of a message of n elements: the ceil(n / kInt8Block) scales, then the n codes.
size_t int8MessageBytes(size_t n);

// msg = the message of x[0, n).
void encodeInt8(const float* x, std::byte* msg, size_t n);
// out[i] = the value of element i of msg.
void decodeInt8(const std::byte* msg, float* out, size_t n);
// out = the message of (y's values + g) (each sum in float32): one hop of the reduce-scatter.
void accumulateInt8(const std::byte* y, const float* g, std::byte* out, size_t n);

// The guard of the int8 wire, from one rank's buffer: bit 0, some element is not finite or
// |x| >= FLT_MAX / N (N such values could overflow a partial sum). Ranks OR the bits; the wire
// runs only if the bit is clear on every rank, else the buffer takes the float32 exact ring.
uint8_t int8GuardBits(const float* x, size_t n, int N);

}  // namespace cerar::codec
