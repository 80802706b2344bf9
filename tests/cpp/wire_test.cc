// The 16-bit wires (docs/wires.md): the casts bit for bit against independent references
// (the compiler's _Float16 for IEEE half, a rounding written on doubles for bfloat16), and the
// exact ring with a 16-bit wire against an extended-precision sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ops/codec/half.h"
#include "ops/codec/wire.h"
#include "common/error.h"
#include "simulate.h"

namespace cerar {
namespace {

uint16_t halfReference(float f) {
  const _Float16 h = static_cast<_Float16>(f);  // libgcc: round to nearest even
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

// bfloat16 as the upper half of a float: the two candidates by truncation, the nearer kept,
// ties to the even one; NaN stays a (quiet) NaN.
uint16_t bf16Reference(float f) {
  const uint32_t bits = codec::floatToBits(f);
  if (std::isnan(f)) return uint16_t((bits >> 16) | 0x40);
  const uint16_t low = uint16_t(bits >> 16);
  if ((bits & 0xffff) == 0) return low;
  const uint16_t high = uint16_t(low + 1);  // next magnitude away from zero (may be inf)
  const double a = codec::bitsToFloat(uint32_t(low) << 16);
  // Beyond the largest finite value, IEEE rounds as if the exponent went on: inf stands at 2^128.
  const double b = (high & 0x7fff) == 0x7f80 ? std::copysign(std::ldexp(1.0, 128), f)
                                             : double(codec::bitsToFloat(uint32_t(high) << 16));
  const double da = std::abs(double(f) - a), db = std::abs(double(f) - b);
  if (da < db) return low;
  if (db < da) return high;
  return (low & 1) ? high : low;
}

uint16_t encode(Wire wire, float f) {
  uint16_t out;
  codec::encodeWire(wire, &f, &out, 1);
  return out;
}
float decode(Wire wire, uint16_t bits) {
  float out;
  codec::decodeWire(wire, &bits, &out, 1);
  return out;
}

uint16_t reference(Wire wire, float f) {
  return wire == Wire::kFloat16 ? halfReference(f) : bf16Reference(f);
}

// Whether two 16-bit patterns are the same value (any NaN equals any NaN).
bool sameValue(Wire wire, uint16_t a, uint16_t b) {
  const float x = decode(wire, a), y = decode(wire, b);
  return (std::isnan(x) && std::isnan(y)) || a == b;
}

float nextUp(float f) { return std::nextafter(f, std::numeric_limits<float>::infinity()); }
float nextDown(float f) { return std::nextafter(f, -std::numeric_limits<float>::infinity()); }

class WireCast : public ::testing::TestWithParam<Wire> {};

// Every 16-bit pattern decodes exactly (as the reference's inverse) and encodes back to
// itself; every midpoint between neighbours rounds to the even one, and a float ulp either
// side to the nearer one. Covers subnormals, the largest finite value's tie to inf, and zero.
TEST_P(WireCast, EveryPatternAndEveryTie) {
  const Wire wire = GetParam();
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = decode(wire, uint16_t(bits));
    if (!std::isnan(f)) {
      ASSERT_EQ(reference(wire, f), bits) << std::hex << bits;
    }
    ASSERT_TRUE(sameValue(wire, encode(wire, f), uint16_t(bits))) << std::hex << bits;
    if (std::isnan(f) || std::isinf(f) || (bits & 0x7fff) == (wire == Wire::kFloat16 ? 0x7bff : 0x7f7f))
      continue;
    const float next = decode(wire, uint16_t(bits + 1));  // next magnitude, same sign
    const float mid = float((double(f) + double(next)) / 2);  // exact in float
    ASSERT_EQ(encode(wire, mid), reference(wire, mid)) << std::hex << bits;
    ASSERT_EQ(encode(wire, mid), (bits & 1) ? bits + 1 : bits) << std::hex << bits;
    for (float near : {nextUp(mid), nextDown(mid)})
      ASSERT_EQ(encode(wire, near), reference(wire, near)) << std::hex << bits;
  }
}

// A spread of float patterns over the whole range, signs, subnormal floats and NaNs included.
TEST_P(WireCast, MatchesReferenceAcrossFloats) {
  const Wire wire = GetParam();
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 65521) {
    const float f = codec::bitsToFloat(uint32_t(bits));
    ASSERT_TRUE(sameValue(wire, encode(wire, f), reference(wire, f))) << std::hex << bits;
  }
}

TEST_P(WireCast, OverflowIsInfAndNanStaysNan) {
  const Wire wire = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  const float big = wire == Wire::kFloat16 ? 65520.0f : std::numeric_limits<float>::max();
  EXPECT_EQ(decode(wire, encode(wire, big)), inf);
  EXPECT_EQ(decode(wire, encode(wire, -big)), -inf);
  EXPECT_EQ(decode(wire, encode(wire, inf)), inf);
  EXPECT_TRUE(std::isnan(decode(wire, encode(wire, std::nanf("")))));
  EXPECT_TRUE(std::isnan(decode(wire, encode(wire, -std::nanf("0x1")))));
  if (wire == Wire::kFloat16) {
    EXPECT_EQ(decode(wire, encode(wire, nextDown(65520.0f))), 65504.0f);
    EXPECT_EQ(encode(wire, 5.9604644775390625e-8f), 0x0001);       // 2^-24, least subnormal
    EXPECT_EQ(encode(wire, 2.98023223876953125e-8f), 0x0000);      // 2^-25 ties to even 0
    EXPECT_EQ(encode(wire, nextUp(2.98023223876953125e-8f)), 0x0001);
    EXPECT_EQ(encode(wire, -1e-9f), 0x8000);                        // -0
  }
  // The hop's add is in float32 before the cast: 1 + 2^-12 twice does not vanish in it.
  const uint16_t one = encode(wire, 1.0f);
  const float g = 0.75f;
  uint16_t out;
  codec::accumulateWire(wire, &one, &g, &out, 1);
  EXPECT_EQ(decode(wire, out), 1.75f);
}

INSTANTIATE_TEST_SUITE_P(Formats, WireCast,
                         ::testing::Values(Wire::kFloat16, Wire::kBFloat16),
                         [](const auto& info) { return std::string(wireName(info.param)); });

AllreduceOptions wireOptions(Wire wire) {
  AllreduceOptions options;
  options.algorithm = Algorithm::kRing;
  options.wire = wire;
  return options;
}

// Error bound of the 16-bit-wire ring (docs/wires.md): element e of a chunk is cast N times
// (the first rank's slice, each of the N-2 sums passed on, the owner's total) and added N-1
// times in float32; each cast errs by at most u_w = 2^-11 (fp16) or 2^-8 (bf16) of the value
// cast, each add by 2^-24 of its sum, every such value being a partial sum within
// sum_i |g_i|. So |result - sum| <= (N u_w + (N-1) 2^-24) sum_i |g_i| to first order; the
// factor 1.01 covers the second-order terms.
void expectWireRingWithinBound(Wire wire, int N, size_t d) {
  auto buffers = testing::correlatedInputs<float>(N, d, 11 * N + d);
  std::vector<testing::Reference> sum, magnitude;
  testing::exactSums(buffers, sum, magnitude);
  const auto result = testing::simulate(buffers, wireOptions(wire));
  const double uw = wire == Wire::kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  const double bound = 1.01 * (N * uw + (N - 1) * std::ldexp(1.0, -24));
  for (int rank = 0; rank < N; ++rank) {
    ASSERT_EQ(std::memcmp(buffers[rank].data(), buffers[0].data(), d * sizeof(float)), 0)
        << "ranks differ, N=" << N;
    // Two bytes per element sent.
    const auto sent = result.stats[rank].bytesSent;
    EXPECT_EQ(sent, makeRingPlan(N, d, rank).elementsSent() * 2);
    for (size_t e = 0; e < d; ++e) {
      const float v = buffers[rank][e];
      ASSERT_EQ(decode(wire, encode(wire, v)), v) << "not a " << wireName(wire) << " value";
      ASSERT_LE(std::abs(v - sum[e]), bound * magnitude[e] + 1e-30)
          << wireName(wire) << " N=" << N << " element " << e;
    }
  }
}

// The one rule of what a lossy wire carries (the planner, the budget, the communicator and the
// Python layers all ask it).
TEST(WireCarries, Float32SumsEverywhereSixteenBitSumsOnInt8Only) {
  for (Wire wire : {Wire::kFloat16, Wire::kBFloat16, Wire::kInt8}) {
    EXPECT_TRUE(wireCarries(wire, DType::kFloat32, ReduceOp::kSum)) << wireName(wire);
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax})
      EXPECT_FALSE(wireCarries(wire, DType::kFloat32, op)) << wireName(wire);
    for (DType dtype : {DType::kFloat64, DType::kInt32, DType::kInt64, DType::kUInt8})
      EXPECT_FALSE(wireCarries(wire, dtype, ReduceOp::kSum)) << wireName(wire);
    for (DType dtype : {DType::kFloat16, DType::kBFloat16})
      EXPECT_EQ(wireCarries(wire, dtype, ReduceOp::kSum), wire == Wire::kInt8) << wireName(wire);
  }
  EXPECT_TRUE(wireCarries(Wire::kNone, DType::kInt64, ReduceOp::kMax));
}

TEST(WireRing, WithinBoundOfExtendedSumAndIdenticalOnEveryRank) {
  for (Wire wire : {Wire::kFloat16, Wire::kBFloat16})
    for (int N : {2, 3, 4, 7})
      for (size_t d : {size_t(1), size_t(5), size_t(1000 + N)})
        expectWireRingWithinBound(wire, N, d);
}

// Streamed in segments (cut-through, the casts overlapping the transfers), the ring gives the
// bits of one segment per message, whatever the segment size and uneven chunk lengths.
TEST(WireRing, SegmentsChangeNoBit) {
  for (Wire wire : {Wire::kFloat16, Wire::kBFloat16}) {
    const int N = 4;
    const size_t d = 3001;
    auto whole = testing::correlatedInputs<float>(N, d, 5);
    auto small = whole, odd = whole;
    testing::simulate(whole, wireOptions(wire), size_t(1) << 20);
    testing::simulate(small, wireOptions(wire), 64);  // 32 elements a segment
    testing::simulate(odd, wireOptions(wire), 2);     // one element a segment
    for (int rank = 0; rank < N; ++rank) {
      EXPECT_EQ(small[rank], whole[rank]) << wireName(wire) << " rank " << rank;
      EXPECT_EQ(odd[rank], whole[rank]) << wireName(wire) << " rank " << rank;
    }
  }
}

TEST(WireRing, HalfTheBytesOfTheFloat32Ring) {
  const int N = 4;
  const size_t d = 4096;
  auto a = testing::correlatedInputs<float>(N, d, 3);
  auto b = a;
  AllreduceOptions plain;
  plain.algorithm = Algorithm::kRing;
  const auto full = testing::simulate(a, plain);
  const auto half = testing::simulate(b, wireOptions(Wire::kFloat16));
  for (int rank = 0; rank < N; ++rank) {
    EXPECT_GT(full.stats[rank].bytesSent, 0u);
    EXPECT_EQ(half.stats[rank].bytesSent * 2, full.stats[rank].bytesSent);
  }
}

TEST(WireRing, OverflowBecomesInfLikeTheExactRing) {
  const int N = 3;
  std::vector<std::vector<float>> buffers(N, std::vector<float>(6, 1.0f));
  buffers[1][2] = 70000.0f;  // beyond fp16's range: every partial sum holding it is cast to inf
  buffers[0][4] = std::numeric_limits<float>::infinity();
  buffers[2][5] = std::nanf("");
  testing::simulate(buffers, wireOptions(Wire::kFloat16));
  for (const auto& b : buffers) {
    EXPECT_EQ(b[0], 3.0f);
    EXPECT_EQ(b[2], std::numeric_limits<float>::infinity());
    EXPECT_EQ(b[4], std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(b[5]));
  }
  std::vector<std::vector<float>> big(N, std::vector<float>(3, 30000.0f));
  testing::simulate(big, wireOptions(Wire::kFloat16));
  for (const auto& b : big)
    for (float v : b) EXPECT_EQ(v, std::numeric_limits<float>::infinity());
}

TEST(WireRing, RefusesWhatItCannotCarry) {
  std::vector<std::vector<double>> f64(2, std::vector<double>(4, 1.0));
  EXPECT_THROW(testing::simulate(f64, wireOptions(Wire::kFloat16)), Error);
  std::vector<std::vector<float>> f32(2, std::vector<float>(4, 1.0f));
  AllreduceOptions cerar = wireOptions(Wire::kBFloat16);
  cerar.algorithm = Algorithm::kCerar;
  EXPECT_THROW(testing::simulate(f32, cerar), Error);
  EXPECT_THROW(parseWire("fp8"), Error);
}

}  // namespace
}  // namespace cerar
