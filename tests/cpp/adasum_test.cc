// Adasum: the pure VHDD schedule, the pair rule, and the runner over the in-process transport
// against a tree reference in fp64.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "ops/adasum_run.h"
#include "ops/algorithms/adasum.h"
#include "ops/codec/half.h"
#include "common/error.h"
#include "ops/transport/inproc.h"
#include "adasum_reference.h"
#include "simulate.h"

namespace cerar {
namespace {

using testing::referenceAdasum;

const std::vector<size_t> kSizes = {0, 1, 2, 3, 7, 8, 100, 1001};

TEST(AdasumPlan, PowerOfTwoOnly) {
  for (int N : {1, 2, 4, 8, 64}) EXPECT_TRUE(validateAdasumSize(N).ok()) << N;
  for (int N : {0, 3, 5, 6, 12}) {
    const Status s = validateAdasumSize(N);
    EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << N;
    EXPECT_NE(s.message.find("power-of-two"), std::string::npos);
  }
}

// After the halving phase the ranks' pieces partition the buffer, and at every level the two
// ranks of a pair split the same range: each keeps what the other gives.
TEST(AdasumPlan, PairsMirrorAndPiecesPartition) {
  for (int N : {1, 2, 4, 8, 16}) {
    for (size_t d : kSizes) {
      std::vector<AdasumPlan> plans;
      for (int rank = 0; rank < N; ++rank) plans.push_back(makeAdasumPlan(N, d, rank));
      std::vector<int> owner(d, -1);
      for (const AdasumPlan& plan : plans) {
        ASSERT_EQ(int(plan.levels.size()), N > 1 ? int(std::log2(N)) : 0);
        for (size_t e = plan.owned.offset; e < plan.owned.offset + plan.owned.length; ++e) {
          ASSERT_EQ(owner[e], -1) << "N=" << N << " d=" << d << " element " << e;
          owner[e] = plan.rank;
        }
        for (size_t i = 0; i < plan.levels.size(); ++i) {
          const AdasumLevel& mine = plan.levels[i];
          const AdasumLevel& theirs = plans[mine.partner].levels[i];
          ASSERT_EQ(mine.distance, 1 << i);
          ASSERT_EQ(theirs.partner, plan.rank);
          ASSERT_NE(mine.lower, theirs.lower);
          ASSERT_EQ(mine.groupFirst, theirs.groupFirst);
          ASSERT_EQ(mine.keep.offset, theirs.give.offset);
          ASSERT_EQ(mine.keep.length, theirs.give.length);
          ASSERT_EQ(mine.give.length, theirs.keep.length);
          // Halves differ by at most one element, the lower rank taking the shorter one.
          ASSERT_LE(mine.keep.length + mine.give.length - 2 * (mine.lower ? mine.keep.length
                                                                           : mine.give.length),
                    1u);
        }
      }
      for (size_t e = 0; e < d; ++e) ASSERT_NE(owner[e], -1) << "element " << e;
    }
  }
}

TEST(AdasumPlan, TensorPiecesClipToTheRange) {
  const std::vector<size_t> sizes = {3, 0, 4, 2};  // [0,3) [3,3) [3,7) [7,9)
  const auto pieces = tensorPieces(sizes, Range{2, 6});
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].tensor, 0u);
  EXPECT_EQ(pieces[0].range.offset, 2u);
  EXPECT_EQ(pieces[0].range.length, 1u);
  EXPECT_EQ(pieces[1].tensor, 2u);
  EXPECT_EQ(pieces[1].range.length, 4u);
  EXPECT_EQ(pieces[2].tensor, 3u);
  EXPECT_EQ(pieces[2].range.offset, 7u);
  EXPECT_EQ(pieces[2].range.length, 1u);
  EXPECT_TRUE(tensorPieces(sizes, Range{5, 0}).empty());
}

TEST(AdasumRule, OrthogonalAddEqualAverageZeroIsIdentity) {
  // a.b = 0: both coefficients 1.
  AdasumCoefficients c = adasumCoefficients(0, 2, 5);
  EXPECT_EQ(c.a, 1);
  EXPECT_EQ(c.b, 1);
  // a = b: a.b = |a|^2 = |b|^2, both 1/2.
  c = adasumCoefficients(3, 3, 3);
  EXPECT_EQ(c.a, 0.5);
  EXPECT_EQ(c.b, 0.5);
  // b = 0: a passes unchanged.
  c = adasumCoefficients(0, 4, 0);
  EXPECT_EQ(c.a, 1);
  EXPECT_EQ(c.b, 1);
  const double a[] = {1, 2}, b[] = {3, -1};
  double sums[3] = {0, 0, 0};
  addDotAndNorms(DType::kFloat64, a, b, 2, sums);
  EXPECT_EQ(sums[0], 1);
  EXPECT_EQ(sums[1], 5);
  EXPECT_EQ(sums[2], 10);
  double out[2];
  adasumCombine(DType::kFloat64, a, b, out, 2, AdasumCoefficients{0.5, 2});
  EXPECT_EQ(out[0], 6.5);
  EXPECT_EQ(out[1], -1);
  EXPECT_THROW(addDotAndNorms(DType::kInt32, a, b, 0, sums), InvalidArgumentError);
}

template <typename T>
double toDouble(T x) {
  if constexpr (std::is_same_v<T, codec::Half>) {
    return codec::toFloat(x);
  } else {
    return double(x);
  }
}

template <typename T>
T fromDouble(double x) {
  if constexpr (std::is_same_v<T, codec::Half>) {
    return codec::fromFloat<codec::Half>(float(x));
  } else {
    return T(x);
  }
}

// Runs the runner on N threads; returns every rank's buffer.
template <typename T>
std::vector<std::vector<T>> runAll(std::vector<std::vector<T>> buffers, DType dtype,
                                   const std::vector<size_t>& sizes) {
  testing::onRanks(int(buffers.size()), [&](int rank, std::unique_ptr<Transport> transport) {
    AdasumRunner runner;
    runner.run(*transport, buffers[rank].data(), dtype, sizes);
  });
  return buffers;
}

template <typename T>
void expectMatchesReference(DType dtype, double tolerance) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  const std::vector<std::vector<size_t>> layouts = {{1}, {5}, {3, 0, 17, 1}, {64, 2, 33}};
  for (int N : {1, 2, 4, 8}) {
    for (const auto& sizes : layouts) {
      size_t d = 0;
      for (size_t n : sizes) d += n;
      std::vector<std::vector<double>> inputs(N, std::vector<double>(d));
      std::vector<std::vector<T>> buffers(N, std::vector<T>(d));
      for (int r = 0; r < N; ++r) {
        for (size_t e = 0; e < d; ++e) {
          buffers[r][e] = fromDouble<T>(normal(rng) + 0.5);  // correlated: a shared mean
          inputs[r][e] = toDouble(buffers[r][e]);
        }
      }
      const std::vector<double> expected = referenceAdasum(inputs, sizes);
      const auto results = runAll(buffers, dtype, sizes);
      double scale = 0;
      for (double x : expected) scale = std::max(scale, std::abs(x));
      for (int r = 0; r < N; ++r) {
        for (size_t e = 0; e < d; ++e) {
          ASSERT_NEAR(toDouble(results[r][e]), expected[e], tolerance * scale)
              << "N=" << N << " rank " << r << " element " << e;
          // Every rank ends with the same bits (one rank computed each element).
          ASSERT_EQ(toDouble(results[r][e]), toDouble(results[0][e]));
        }
      }
    }
  }
}

TEST(AdasumRunner, MatchesTheTreeReferenceF64) {
  expectMatchesReference<double>(DType::kFloat64, 1e-12);
}
TEST(AdasumRunner, MatchesTheTreeReferenceF32) {
  expectMatchesReference<float>(DType::kFloat32, 1e-5);
}
TEST(AdasumRunner, MatchesTheTreeReferenceF16) {
  expectMatchesReference<codec::Half>(DType::kFloat16, 1e-2);
}

TEST(AdasumRunner, OrthogonalAddAndEqualAverage) {
  const int N = 4;
  const size_t d = 8;
  std::vector<std::vector<double>> orthogonal(N, std::vector<double>(d, 0.0));
  for (int r = 0; r < N; ++r) orthogonal[r][2 * r] = r + 1.0, orthogonal[r][2 * r + 1] = -2.0;
  const auto sums = runAll(orthogonal, DType::kFloat64, {d});
  for (int r = 0; r < N; ++r) {
    for (size_t e = 0; e < d; ++e) {
      double expected = 0;
      for (int q = 0; q < N; ++q) expected += orthogonal[q][e];
      ASSERT_EQ(sums[r][e], expected);
    }
  }
  std::vector<std::vector<double>> equal(N, {1.5, -2, 0.25, 3});
  const auto averages = runAll(equal, DType::kFloat64, {4});
  for (int r = 0; r < N; ++r) EXPECT_EQ(averages[r], equal[0]);
}

TEST(AdasumRunner, NonPowerOfTwoFailsOnEveryRankBeforeSending) {
  const int N = 3;
  InprocHub hub(N, std::chrono::seconds(20));
  std::vector<int> failures(N, 0);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      auto transport = hub.connect(rank);
      std::vector<float> data(6, 1.0f);
      try {
        AdasumRunner().run(*transport, data.data(), DType::kFloat32, {6});
      } catch (const InvalidArgumentError& e) {
        failures[rank] = std::string(e.what()).find("power-of-two") != std::string::npos;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < N; ++rank) EXPECT_EQ(failures[rank], 1) << rank;
}

}  // namespace
}  // namespace cerar
