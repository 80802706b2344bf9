// op=Adasum through the runtime (negotiation, fusion, dispatch) with every rank a thread:
// grouped and concurrently launched tensors against the fp64 reference, postscale, a
// mismatched op and a non-power-of-two job failing on every rank.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "adasum_reference.h"
#include "core/runtime.h"
#include "common/error.h"
#include "ops/transport/inproc.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;

// Runs body(rank, runtime) on N threads, each with its own runtime.
void onRanks(int N, const std::function<void(int, Runtime&)>& body) {
  InprocHub hub(N, 20s);
  std::vector<std::string> errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        RuntimeConfig config;
        config.cycleTimeMs = 1;
        config.measureLink = false;
        config.timeoutSeconds = 20;
        auto rt = Runtime::startWith(config, hub.connect(rank));
        body(rank, *rt);
        rt->shutdown();
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < N; ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

Tensor f64(std::vector<double>& v) {
  return Tensor{v.data(), DType::kFloat64, {int64_t(v.size())}, -1};
}

TEST(RuntimeAdasum, FusedAndSingleMatchTheReference) {
  const int N = 4;
  const std::vector<size_t> sizes = {13, 1, 40};
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.2, 1.0);
  std::vector<std::vector<double>> inputs(N);
  for (auto& input : inputs) {
    for (size_t k = 0; k < 54; ++k) input.push_back(normal(rng));
  }
  const std::vector<double> expected = testing::referenceAdasum(inputs, sizes);
  onRanks(N, [&](int rank, Runtime& rt) {
    auto split = [&] {
      std::vector<std::vector<double>> parts;
      size_t start = 0;
      for (size_t n : sizes) {
        parts.emplace_back(inputs[rank].begin() + start, inputs[rank].begin() + start + n);
        start += n;
      }
      return parts;
    };
    auto grouped = split(), single = split();
    std::vector<Tensor> views;
    for (auto& part : grouped) views.push_back(f64(part));
    rt.groupedAllreduce({"g.0", "g.1", "g.2"}, views, views, Op::kAdasum, 1.0, 2.0).wait();
    std::vector<Handle> handles;
    for (size_t t = 0; t < single.size(); ++t) {
      handles.push_back(rt.allreduce("s." + std::to_string(t), f64(single[t]), f64(single[t]),
                                     Op::kAdasum));
    }
    for (auto& h : handles) h.wait();
    size_t e = 0;
    for (size_t t = 0; t < sizes.size(); ++t) {
      for (size_t k = 0; k < sizes[t]; ++k, ++e) {
        ASSERT_NEAR(grouped[t][k], 2 * expected[e], 1e-12 * std::abs(expected[e]) + 1e-14);
        ASSERT_NEAR(single[t][k], expected[e], 1e-12 * std::abs(expected[e]) + 1e-14);
      }
    }
  });
}

TEST(RuntimeAdasum, MismatchedOpFailsOnEveryRank) {
  onRanks(2, [](int rank, Runtime& rt) {
    std::vector<double> v(5, 1.0);
    Handle h = rt.allreduce("x", f64(v), f64(v), rank == 0 ? Op::kAdasum : Op::kSum);
    EXPECT_THROW(h.wait(), MismatchError) << "rank " << rank;
  });
}

TEST(RuntimeAdasum, NonPowerOfTwoAndIntegersFailOnEveryRank) {
  onRanks(3, [](int rank, Runtime& rt) {
    std::vector<double> v(5, 1.0);
    try {
      rt.allreduce("x", f64(v), f64(v), Op::kAdasum).wait();
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("power-of-two"), std::string::npos) << e.what();
    }
    std::vector<int32_t> ints(4, 1);
    Tensor t{ints.data(), DType::kInt32, {4}, -1};
    EXPECT_THROW(rt.allreduce("i", t, t, Op::kAdasum).wait(), InvalidArgumentError);
  });
}

}  // namespace
}  // namespace cerar
