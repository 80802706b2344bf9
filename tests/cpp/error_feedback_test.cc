// Error feedback (core/execution/error_feedback.h, ops/wire_run.h's `lost`): every rank's losses, summed,
// are the lossy wire's error on every element; where no wire ran nothing was lost; residuals
// are kept per name and dropped when a name's shape changes or an exact run consumed them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "core/execution/error_feedback.h"
#include "ops/communicator.h"
#include "ops/transport/inproc.h"
#include "simulate.h"

namespace cerar {
namespace {

// One all-reduce on N threads, each rank keeping its losses.
RunStats reduceKeepingLosses(std::vector<std::vector<float>>& buffers, Wire wire,
                             std::vector<std::vector<float>>& lost) {
  const int N = int(buffers.size());
  InprocHub hub(N, std::chrono::seconds(20));
  lost.assign(N, std::vector<float>(buffers[0].size(), std::nanf("")));
  std::vector<RunStats> stats(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      Communicator communicator(hub.connect(rank), std::make_unique<Executor>(Pacing{4096, 0}));
      AllreduceOptions options;
      options.algorithm = Algorithm::kRing;
      options.wire = wire;
      options.lost = lost[rank].data();
      stats[rank] = communicator.allreduce(buffers[rank].data(), buffers[rank].size(),
                                           DType::kFloat32, options);
    });
  }
  for (auto& t : threads) t.join();
  return stats[0];
}

class LossesByWire : public ::testing::TestWithParam<Wire> {};

// S = R + sum_r lost_r up to the float32 rounding of the hops' adds (N - 1 of them, each
// within 2^-24 of a partial sum), far below the wire's own error, which the losses account for.
TEST_P(LossesByWire, SumToTheResultsError) {
  for (int N : {2, 3, 4, 7}) {
    auto inputs = testing::correlatedInputs<float>(N, 5000, 17 + N);
    std::vector<testing::Reference> sum, magnitude;
    testing::exactSums(inputs, sum, magnitude);
    std::vector<std::vector<float>> lost;
    const RunStats run = reduceKeepingLosses(inputs, GetParam(), lost);
    ASSERT_FALSE(run.wireFallback);
    double wireError = 0, leftOver = 0, scale = 0;
    for (size_t e = 0; e < sum.size(); ++e) {
      long double restored = inputs[0][e];
      for (int r = 0; r < N; ++r) restored += lost[r][e];
      wireError = std::max(wireError, double(std::fabs(sum[e] - inputs[0][e])));
      leftOver = std::max(leftOver, double(std::fabs(sum[e] - restored)));
      scale = std::max(scale, double(magnitude[e]));
    }
    EXPECT_LE(leftOver, 2 * N * 0x1p-24 * scale) << wireName(GetParam()) << " N " << N;
    EXPECT_GT(wireError, 20 * leftOver) << wireName(GetParam()) << " N " << N;
  }
}

INSTANTIATE_TEST_SUITE_P(Wires, LossesByWire,
                         ::testing::Values(Wire::kFloat16, Wire::kBFloat16, Wire::kInt8),
                         [](const auto& info) { return std::string(wireName(info.param)); });

// The int8 guard's fallback runs the float32 ring (nothing lost), as one rank does.
TEST(ErrorFeedbackRing, NothingLostWhereNoWireRan) {
  auto inputs = testing::correlatedInputs<float>(3, 3000, 5);
  inputs[1][7] = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> lost;
  EXPECT_TRUE(reduceKeepingLosses(inputs, Wire::kInt8, lost).wireFallback);
  for (const auto& l : lost)
    for (float x : l) ASSERT_EQ(x, 0.0f);
  std::vector<std::vector<float>> one = {std::vector<float>(100, 1.5f)};
  reduceKeepingLosses(one, Wire::kInt8, lost);
  for (float x : lost[0]) ASSERT_EQ(x, 0.0f);
}

TEST(ErrorFeedbackStore, PerNameDroppedOnReshapeOrExactRun) {
  ErrorFeedback feedback;
  EXPECT_EQ(feedback.residual("0:a", {4}), nullptr);
  const std::vector<float> lost = {1, 2, 3, 4, 5, 6};
  feedback.keep({{"0:a", {4}, 0, 4}, {"0:b", {2}, 4, 2}}, lost.data());
  EXPECT_EQ(feedback.tensors(), 2u);
  const float* a = feedback.residual("0:a", {4});
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(std::vector<float>(a, a + 4), std::vector<float>({1, 2, 3, 4}));
  const float* b = feedback.residual("0:b", {2});
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b[1], 6);
  EXPECT_EQ(feedback.residual("1:b", {2}), nullptr);  // another set's b
  EXPECT_EQ(feedback.residual("0:a", {2, 2}), nullptr);  // reshaped: dropped
  EXPECT_EQ(feedback.residual("0:a", {4}), nullptr);
  feedback.keep({{"0:b", {2}, 4, 2}}, nullptr);  // an exact run consumed it
  EXPECT_EQ(feedback.tensors(), 0u);
}

}  // namespace
}  // namespace cerar
