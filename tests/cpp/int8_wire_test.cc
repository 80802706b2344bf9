// The int8 wire (docs/wires.md, "8-bit wire"): every code against its definition, the rounding,
// the blocks' scales and what cannot be carried, and the exact ring with the int8 wire against
// an extended-precision sum, bit-identical on every rank and in any segmentation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/policy/error_budget.h"
#include "ops/algorithms/plan.h"
#include "ops/codec/int8_wire.h"
#include "ops/codec/wire.h"
#include "common/error.h"
#include "simulate.h"

namespace cerar {
namespace {

using codec::kInt8Block;

std::vector<std::byte> encoded(const std::vector<float>& x) {
  std::vector<std::byte> msg(codec::int8MessageBytes(x.size()));
  codec::encodeInt8(x.data(), msg.data(), x.size());
  return msg;
}

std::vector<float> decoded(const std::vector<std::byte>& msg, size_t n) {
  std::vector<float> out(n);
  codec::decodeInt8(msg.data(), out.data(), n);
  return out;
}

float scaleOf(const std::vector<std::byte>& msg, size_t block) {
  float scale;
  std::memcpy(&scale, msg.data() + block * sizeof(float), sizeof(float));
  return scale;
}

int8_t codeOf(const std::vector<std::byte>& msg, size_t n, size_t i) {
  const size_t blocks = (n + kInt8Block - 1) / kInt8Block;
  return int8_t(msg[blocks * sizeof(float) + i]);
}

TEST(Int8Wire, MessageIsScalesThenCodes) {
  EXPECT_EQ(codec::int8MessageBytes(0), 0u);
  EXPECT_EQ(codec::int8MessageBytes(1), 5u);
  EXPECT_EQ(codec::int8MessageBytes(kInt8Block), kInt8Block + 4);
  EXPECT_EQ(codec::int8MessageBytes(kInt8Block + 1), kInt8Block + 9);
  EXPECT_EQ(wireElementBytes(Wire::kInt8, 4), 1u);
  EXPECT_EQ(parseWire("int8"), Wire::kInt8);
  EXPECT_STREQ(wireName(Wire::kInt8), "int8");
}

// Every code: decoded as code * scale (one float32 multiply), and each of -127..127 encodes
// back to itself in a block whose largest magnitude is 127 scales; -128 is never made.
TEST(Int8Wire, EveryCodeRoundTrips) {
  for (float scale : {0x1p-7f, 0x1p-30f, 3.0f, 0x1p+100f}) {
    std::vector<float> x;
    for (int code = -127; code <= 127; ++code) x.push_back(float(code) * scale);
    const auto msg = encoded(x);
    ASSERT_EQ(scaleOf(msg, 0), scale);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(codeOf(msg, x.size(), i), int(i) - 127);
    EXPECT_EQ(decoded(msg, x.size()), x);
  }
  // The decoder's definition, all 256 codes (-128 included, though never encoded).
  std::vector<std::byte> msg(codec::int8MessageBytes(256));
  const float scale = 0.0123f;
  std::memcpy(msg.data(), &scale, sizeof(float));
  for (int i = 0; i < 256; ++i) msg[4 + i] = std::byte(uint8_t(i));
  const auto values = decoded(msg, 256);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(values[i], float(int8_t(uint8_t(i))) * scale);
  // Scale 2^-7 (largest -127 scales): ties round to the even code, others to the nearer.
  const float s = 0x1p-7f;
  const auto ties = encoded({-127 * s, 63.5f * s, 62.5f * s, 31.75f * s, -0.5f * s});
  EXPECT_EQ(codeOf(ties, 5, 0), -127);
  EXPECT_EQ(codeOf(ties, 5, 1), 64);
  EXPECT_EQ(codeOf(ties, 5, 2), 62);
  EXPECT_EQ(codeOf(ties, 5, 3), 32);
  EXPECT_EQ(codeOf(ties, 5, 4), 0);
}

// Each element within half a scale (plus the decode's rounding) of its value; scales per
// block, so a large block leaves a small one's precision alone.
TEST(Int8Wire, EachElementWithinHalfItsBlocksScale) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const size_t n = 3 * kInt8Block + 17;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = normal(rng) * (i < kInt8Block ? 1000.0f : 0.001f);
  const auto msg = encoded(x);
  const auto y = decoded(msg, n);
  for (size_t i = 0; i < n; ++i) {
    const float scale = scaleOf(msg, i / kInt8Block);
    ASSERT_LE(std::abs(double(y[i]) - x[i]), scale * (0.5 + 0x1p-23) + std::abs(x[i]) * 0x1p-24)
        << i;
  }
  EXPECT_LT(scaleOf(msg, 1), 1e-4f);
}

TEST(Int8Wire, ZerosTinyValuesAndNonFiniteBlocks) {
  const auto zeros = encoded(std::vector<float>(10, 0.0f));
  EXPECT_EQ(scaleOf(zeros, 0), 0.0f);
  EXPECT_EQ(decoded(zeros, 10), std::vector<float>(10, 0.0f));
  // A block whose largest magnitude / 127 underflows: all zero, an error below 2^-142.
  const auto tiny = encoded({std::numeric_limits<float>::denorm_min(), 0.0f});
  EXPECT_EQ(decoded(tiny, 2)[0], 0.0f);
  // A non-finite value: the block decodes as NaN (the guard keeps such buffers off the wire).
  std::vector<float> x(kInt8Block + 3, 1.0f);
  x[5] = std::numeric_limits<float>::infinity();
  const auto y = decoded(encoded(x), x.size());
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[kInt8Block - 1]));
  EXPECT_EQ(y[kInt8Block], 1.0f);  // the next block is its own
  EXPECT_EQ(codec::int8GuardBits(x.data(), x.size(), 4), 1);
  x[5] = std::nanf("");
  EXPECT_EQ(codec::int8GuardBits(x.data(), x.size(), 4), 1);
  x[5] = std::numeric_limits<float>::max() / 2;
  EXPECT_EQ(codec::int8GuardBits(x.data(), x.size(), 2), 1);  // two could overflow
  EXPECT_EQ(codec::int8GuardBits(x.data(), x.size(), 1), 0);
  x[5] = 1e30f;
  EXPECT_EQ(codec::int8GuardBits(x.data(), x.size(), 64), 0);
}

// One hop: the add is float32 before the cast.
TEST(Int8Wire, AccumulateAddsInFloat32ThenEncodes) {
  const std::vector<float> y = {1.0f, -0.5f, 0.25f};
  const std::vector<float> g = {0.5f, 0.5f, 0.0f};
  const auto in = encoded(y);
  std::vector<std::byte> out(codec::int8MessageBytes(3));
  codec::accumulateInt8(in.data(), g.data(), out.data(), 3);
  std::vector<float> sums(3);
  const auto yValues = decoded(in, 3);
  for (int i = 0; i < 3; ++i) sums[i] = yValues[i] + g[i];
  EXPECT_EQ(out, encoded(sums));
}

AllreduceOptions int8Options() {
  AllreduceOptions options;
  options.algorithm = Algorithm::kRing;
  options.wire = Wire::kInt8;
  return options;
}

// The ring with the int8 wire: each element cast N times, each cast within half its block's
// scale, the block's scale at most its largest partial sum / 127 (wireErrorBound); relative to
// the buffer's largest sum of magnitudes, 1.01 covering second-order terms.
void expectInt8RingWithinBound(int N, size_t d) {
  auto buffers = testing::correlatedInputs<float>(N, d, 13 * N + d);
  std::vector<testing::Reference> sum, magnitude;
  testing::exactSums(buffers, sum, magnitude);
  testing::Reference largest = 0;
  for (auto m : magnitude) largest = std::max(largest, m);
  const auto result = testing::simulate(buffers, int8Options());
  const double bound = 1.01 * wireErrorBound(N, Wire::kInt8) * double(largest);
  for (int rank = 0; rank < N; ++rank) {
    ASSERT_EQ(std::memcmp(buffers[rank].data(), buffers[0].data(), d * sizeof(float)), 0)
        << "ranks differ, N=" << N << " d=" << d;
    EXPECT_FALSE(result.stats[rank].wireFallback);
    const Plan plan = makeRingPlan(N, d, rank);
    size_t bytes = 0;
    for (const Round& round : plan.rounds) bytes += codec::int8MessageBytes(round.message);
    EXPECT_EQ(result.stats[rank].bytesSent, bytes);
    for (size_t e = 0; e < d; ++e)
      ASSERT_LE(std::abs(double(buffers[rank][e] - sum[e])), bound) << "N=" << N << " e=" << e;
  }
}

TEST(Int8Ring, WithinBoundOfExtendedSumAndIdenticalOnEveryRank) {
  for (int N : {2, 3, 4, 7})
    for (size_t d : {size_t(1), size_t(5), size_t(1000 + N), size_t(5 * kInt8Block + 3 * N)})
      expectInt8RingWithinBound(N, d);
}

// Segments are whole blocks, so any segment size gives the same bits.
TEST(Int8Ring, SegmentsChangeNoBit) {
  const int N = 4;
  const size_t d = 9 * kInt8Block + 77;
  auto whole = testing::correlatedInputs<float>(N, d, 5);
  auto small = whole, odd = whole;
  testing::simulate(whole, int8Options(), size_t(1) << 20);
  testing::simulate(small, int8Options(), 3000);
  testing::simulate(odd, int8Options(), 2);
  for (int rank = 0; rank < N; ++rank) {
    EXPECT_EQ(small[rank], whole[rank]) << "rank " << rank;
    EXPECT_EQ(odd[rank], whole[rank]) << "rank " << rank;
  }
}

TEST(Int8Ring, AboutAQuarterOfTheFloat32RingsBytes) {
  const int N = 4;
  const size_t d = 64 * kInt8Block;
  auto a = testing::correlatedInputs<float>(N, d, 3);
  auto b = a;
  AllreduceOptions plain;
  plain.algorithm = Algorithm::kRing;
  const auto full = testing::simulate(a, plain);
  const auto int8 = testing::simulate(b, int8Options());
  for (int rank = 0; rank < N; ++rank) {
    const double ratio = double(int8.stats[rank].bytesSent) / double(full.stats[rank].bytesSent);
    EXPECT_GT(ratio, 0.25);
    EXPECT_LT(ratio, 0.25 * (1 + 5.0 / kInt8Block));
  }
}

// A rank's inf, NaN or value that could overflow a partial sum: every rank runs the float32
// exact ring instead, with its results.
TEST(Int8Ring, WhatItCannotCarryTakesTheExactRingOnEveryRank) {
  const int N = 3;
  const size_t d = 2 * kInt8Block;
  for (float odd : {std::numeric_limits<float>::infinity(), std::nanf(""), 2e38f}) {
    auto buffers = testing::correlatedInputs<float>(N, d, 9);
    buffers[1][kInt8Block + 2] = odd;
    auto exact = buffers;
    AllreduceOptions plain;
    plain.algorithm = Algorithm::kRing;
    testing::simulate(exact, plain);
    const auto result = testing::simulate(buffers, int8Options());
    for (int rank = 0; rank < N; ++rank) {
      EXPECT_TRUE(result.stats[rank].wireFallback);
      ASSERT_EQ(std::memcmp(buffers[rank].data(), exact[rank].data(), d * sizeof(float)), 0);
    }
  }
  std::vector<std::vector<double>> f64(2, std::vector<double>(4, 1.0));
  EXPECT_THROW(testing::simulate(f64, int8Options()), Error);
}

// 16-bit data on the int8 wire runs over a float32 copy and is rounded back once: the float32
// run's result in the data's format, bit for bit, on every rank, within the predicted error;
// what the wire cannot carry takes the data's own exact ring; one rank leaves it as it is.
TEST(Int8Ring, SixteenBitDataRidesAFloat32Copy) {
  for (Wire format : {Wire::kFloat16, Wire::kBFloat16}) {
    const DType dtype = format == Wire::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
    for (int N : {1, 2, 3, 4, 7}) {
      const size_t d = 3 * kInt8Block + 5 * N;
      auto wide = testing::correlatedInputs<float>(N, d, 7 * N + 1);
      std::vector<std::vector<uint16_t>> narrow(N, std::vector<uint16_t>(d));
      for (int rank = 0; rank < N; ++rank) {  // the float32 inputs: the 16-bit values exactly
        codec::encodeWire(format, wide[rank].data(), narrow[rank].data(), d);
        codec::decodeWire(format, narrow[rank].data(), wide[rank].data(), d);
      }
      std::vector<testing::Reference> sum, magnitude;
      testing::exactSums(wide, sum, magnitude);
      testing::Reference largest = 0;
      for (auto m : magnitude) largest = std::max(largest, m);
      const auto inputs = narrow;
      const auto f32 = testing::simulate(wide, int8Options());
      const auto result =
          testing::simulate(narrow, int8Options(), Executor::kDefaultSegmentBytes, dtype);
      std::vector<uint16_t> expected(d);
      codec::encodeWire(format, wide[0].data(), expected.data(), d);
      const double bound =
          1.01 * predictedError(ErrorChoice::wireRing(Wire::kInt8, dtype), N, d,
                                ErrorBound::kStrict) * double(largest);
      std::vector<float> back(d);
      for (int rank = 0; rank < N; ++rank) {
        ASSERT_EQ(narrow[rank], N == 1 ? inputs[0] : expected) << "N=" << N << " rank " << rank;
        EXPECT_FALSE(result.stats[rank].wireFallback);
        EXPECT_EQ(result.stats[rank].bytesSent, f32.stats[rank].bytesSent);
        codec::decodeWire(format, narrow[rank].data(), back.data(), d);
        for (size_t e = 0; e < d; ++e)
          ASSERT_LE(std::abs(double(back[e] - sum[e])), bound) << "N=" << N << " e=" << e;
      }
    }
    // An inf: the data's own exact ring on every rank, its bytes.
    const int N = 3;
    const size_t d = 2 * kInt8Block;
    auto wide = testing::correlatedInputs<float>(N, d, 11);
    wide[2][5] = std::numeric_limits<float>::infinity();
    std::vector<std::vector<uint16_t>> narrow(N, std::vector<uint16_t>(d));
    for (int rank = 0; rank < N; ++rank)
      codec::encodeWire(format, wide[rank].data(), narrow[rank].data(), d);
    auto exact = narrow;
    AllreduceOptions plain;
    plain.algorithm = Algorithm::kRing;
    const auto ring = testing::simulate(exact, plain, Executor::kDefaultSegmentBytes, dtype);
    const auto result =
        testing::simulate(narrow, int8Options(), Executor::kDefaultSegmentBytes, dtype);
    for (int rank = 0; rank < N; ++rank) {
      EXPECT_TRUE(result.stats[rank].wireFallback);
      EXPECT_EQ(result.stats[rank].bytesSent, ring.stats[rank].bytesSent);
      EXPECT_EQ(narrow[rank], exact[rank]) << "rank " << rank;
    }
  }
}

}  // namespace
}  // namespace cerar
