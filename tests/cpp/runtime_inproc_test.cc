// The runtime with every rank a thread of this process (InprocHub): the scenarios of
// runtime_scenarios.h, plus what only threads can stage (a peer that dies mid-job, a forced
// CERAR selection with numerics checked against a reference, one-process runtimes).
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <unistd.h>

#include "ops/transport/inproc.h"
#include "runtime_scenarios.h"

namespace cerar {
namespace {

using namespace scenarios;

// Runs `scenario` on N threads; returns each rank's outcome or fails the test with the first
// rank's error.
std::vector<std::string> runThreads(int N, const Scenario& scenario,
                                    std::chrono::milliseconds timeout = 20s) {
  InprocHub hub(N, timeout);
  std::vector<std::string> results(N), errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      std::shared_ptr<Transport> transport = hub.connect(rank);
      Starter start = [transport](RuntimeConfig config) {
        return Runtime::startWith(config, transport);
      };
      try {
        results[rank] = scenario(rank, start);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < N; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
  }
  return results;
}

TEST(RuntimeInproc, OpsAndScales) {
  for (int N : {1, 2, 4}) runThreads(N, opsAndScales);
}

TEST(RuntimeInproc, OutOfOrderAndMultiThreaded) { runThreads(4, outOfOrderMultiThreaded); }

TEST(RuntimeInproc, FusedEqualsUnfusedBitIdenticalAcrossRanks) {
  auto results = runThreads(3, fusedEqualsUnfused);
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
}

// The stats guarantee (runtime.h): once wait() returns, or the callback runs, the operation is
// counted on this rank; no barrier or sleep in between. Read right after each wait, 40 times,
// host and callback paths: a lag of one coordinator cycle would show as a short count.
TEST(RuntimeInproc, StatsIncludeEveryCompletedOperation) {
  runThreads(4, [](int rank, const Starter& start) {
    auto rt = start(testConfig());
    std::vector<float> data(1000, float(rank));
    for (uint64_t i = 1; i <= 40; ++i) {
      const std::string name = "s" + std::to_string(i % 3);
      if (i % 2) {
        rt->allreduce(name, f32(data), f32(data), Op::kSum).wait();
        const RuntimeStats s = rt->stats();
        check(s.fusedBuffers == i && s.tensorsReduced == i, "after ", i, " waits: ",
              s.fusedBuffers, " buffers, ", s.tensorsReduced, " tensors");
      } else {
        std::promise<uint64_t> seen;
        Runtime* runtime = rt.get();
        rt->allreduce(name, f32(data), f32(data), Op::kSum, 1.0, 1.0,
                      [&](const Status&) { seen.set_value(runtime->stats().fusedBuffers); });
        const uint64_t counted = seen.get_future().get();
        check(counted == i, "in the callback of operation ", i, ": ", counted, " buffers");
      }
    }
    return std::string("ok");
  });
}

TEST(RuntimeInproc, CacheHitsInSteadyLoop) { runThreads(4, cacheHits); }

TEST(RuntimeInproc, JoinWithUnevenSteps) { runThreads(4, joinUneven); }

TEST(RuntimeInproc, TimelineParses) {
  const std::string pattern = ::testing::TempDir() + "cerar_inproc_timeline_{rank}.json";
  runThreads(2, [&](int rank, const Starter& start) { return timeline(rank, start, pattern); });
}

TEST(RuntimeInproc, StallReportNamesMissingRank) { runThreads(3, stallReport); }

TEST(RuntimeInproc, MismatchFailsEveryRank) { runThreads(4, mismatch); }

TEST(RuntimeInproc, ShutdownWithWorkPending) { runThreads(4, shutdownPending); }

TEST(RuntimeInproc, DuplicateNameAndBadArgumentsFailAtOnce) {
  runThreads(2, [](int, const Starter& start) {
    auto rt = start(testConfig());
    std::vector<float> v(4, 1);
    std::vector<int32_t> ints(4, 1);
    Handle first = rt->allreduce("dup", f32(v), f32(v), Op::kSum);
    bool called = false;
    Handle second = rt->allreduce("dup", f32(v), f32(v), Op::kSum,
                                  1.0, 1.0, [&](const Status& s) { called = !s.ok(); });
    check(second.poll() && called, "duplicate not refused at once");
    check(failure(second).find("already in flight") != std::string::npos, failure(second));
    first.wait();
    Tensor i32{ints.data(), DType::kInt32, {4}, -1};
    check(failure(rt->allreduce("avg-int", i32, i32, Op::kAverage)).find("average needs") !=
              std::string::npos, "integer average accepted");
    Tensor gpu = f32(v);
    gpu.device = 0;
    check(!failure(rt->allreduce("gpu", gpu, gpu, Op::kSum)).empty(), "device tensor accepted");
    check(!failure(rt->broadcast("b", f32(v), 7)).empty(), "bad root accepted");
    rt->barrier().wait();
    return std::string("ok");
  });
}

TEST(RuntimeInproc, ForcedCerarSelectedAndAccurate) {
  auto results = runThreads(4, [](int rank, const Starter& start) {
    RuntimeConfig config = testConfig();
    config.algorithm = "cerar";
    config.components = 16;
    auto rt = start(config);
    const size_t d = 1 << 14;
    auto input = [&](int r) {
      std::mt19937 gen(r + 11);
      std::normal_distribution<float> normal(0, 1);
      std::vector<float> v(d);
      for (auto& x : v) x = 1.0f + normal(gen);
      return v;
    };
    std::vector<float> data = input(rank);
    rt->allreduce("grad", f32(data), f32(data), Op::kAverage).wait();
    double worst = 0, scale = 0;
    std::vector<std::vector<float>> all;
    for (int r = 0; r < 4; ++r) all.push_back(input(r));
    for (size_t i = 0; i < d; ++i) {
      double exact = 0;
      for (int r = 0; r < 4; ++r) exact += all[r][i];
      exact /= 4;
      worst = std::max(worst, std::fabs(data[i] - exact));
      scale = std::max(scale, std::fabs(exact));
    }
    rt->barrier().wait();
    const RuntimeStats s = rt->stats();
    check(s.cerarBuffers == 1 && s.ringBuffers == 0, "cerar buffers ", s.cerarBuffers);
    check(worst <= 5e-3 * scale, "CERAR error ", worst / scale, " of max |S|");
    check(worst > 0, "CERAR with r = 4 should not be exact");
    return std::string("ok");
  });
}

// CERAR_SHARE_CORRECTION and CERAR_DEBUG_ERROR: the predicted bound is always recorded, the
// measured error (against the exact ring on a copy) only in debug mode, and it is within it.
TEST(RuntimeInproc, ShareCorrectionAndErrorReporting) {
  runThreads(4, [](int rank, const Starter& start) {
    RuntimeConfig config = testConfig();
    config.algorithm = "cerar";
    config.components = 16;
    config.shareCorrection = true;
    config.debugError = true;
    auto rt = start(config);
    std::mt19937 gen(rank + 3);
    std::normal_distribution<float> normal(0, 1);
    std::vector<float> data(1 << 12);
    for (auto& x : data) x = 1.0f + normal(gen);
    rt->allreduce("grad", f32(data), f32(data), Op::kSum).wait();
    rt->barrier().wait();
    const RuntimeStats s = rt->stats();
    check(s.cerarBuffers == 1 && s.measuredBuffers == 1, "measured ", s.measuredBuffers);
    check(s.predictedErrorMax > 0, "no predicted bound");
    check(s.measuredErrorMax > 0 && s.measuredErrorMax <= s.predictedErrorMax * 2,
          "measured ", s.measuredErrorMax, " predicted ", s.predictedErrorMax);
    return std::string("ok");
  });
}

TEST(RuntimeInproc, DeadPeerFailsPendingAndLaterOperations) {
  InprocHub hub(3, 500ms);
  std::vector<std::string> errors(3), later(3);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      auto rt = Runtime::startWith(testConfig(), hub.connect(rank));
      std::vector<float> v(4, 1);
      rt->allreduce("warm", f32(v), f32(v), Op::kSum).wait();
      rt->barrier().wait();
      if (rank == 2) {
        hub.kill(2);
        return;  // rank 2 is gone; its runtime ends with its own timeout
      }
      errors[rank] = failure(rt->allreduce("never", f32(v), f32(v), Op::kSum));
      later[rank] = failure(rt->allreduce("after", f32(v), f32(v), Op::kSum));
      rt->shutdown();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(errors[0].find("rank 2"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("lost contact with rank"), std::string::npos) << errors[1];
  EXPECT_EQ(later[0], errors[0]);
}

TEST(RuntimeInproc, OneProcessRuntimeFromStart) {
  RuntimeConfig config = testConfig();
  auto rt = Runtime::start(config);
  EXPECT_EQ(rt->size(), 1);
  std::vector<float> in(3, 2.0f), out(3);
  rt->allreduce("x", f32(in), f32(out), Op::kAverage, 1.0, 3.0).wait();
  EXPECT_EQ(out[2], 6.0f);
  Handle g = rt->allgather("g", view(in, {3, 1}, DType::kFloat32));
  g.wait();
  EXPECT_EQ(g.outputShape(), (std::vector<int64_t>{3, 1}));
  Handle j = rt->join();
  j.wait();
  EXPECT_EQ(j.lastJoinedRank(), 0);
  rt->shutdown();
  rt->shutdown();
  // init -> shutdown -> init
  auto again = Runtime::start(config);
  again->barrier().wait();
}

}  // namespace
}  // namespace cerar
