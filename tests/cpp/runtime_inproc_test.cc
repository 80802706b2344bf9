// The runtime with every rank a thread of this process (InprocHub): the scenarios of
// runtime_scenarios.h, plus what only threads can stage (a peer that dies mid-job, a forced
// CERAR selection with numerics checked against a reference, one-process runtimes).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <unistd.h>

#include "ops/control_tree.h"
#include "core/control/message.h"
#include "ops/communicator.h"
#include "ops/control_frame.h"
#include "ops/algorithms/plan.h"
#include "ops/transport/forwarding.h"
#include "ops/transport/inproc.h"
#include "runtime_scenarios.h"
#include "simulate.h"

namespace cerar {
namespace {

using namespace scenarios;

// A slow link: every send of at least 64 KiB (the data, not the control messages) starts
// `delay` late.
class SlowSends final : public ForwardingTransport {
 public:
  SlowSends(std::shared_ptr<Transport> base, std::chrono::milliseconds delay)
      : ForwardingTransport(std::move(base)), delay_(delay) {}
  void postSend(int peer, const void* data, size_t bytes) override {
    if (bytes >= 64 * 1024) std::this_thread::sleep_for(delay_);
    inner_->postSend(peer, data, bytes);
  }

 private:
  std::chrono::milliseconds delay_;
};

// Runs `scenario` on N threads; returns each rank's outcome or fails the test with the first
// rank's error. `slow` (>= 0): that rank's data sends are late (SlowSends).
std::vector<std::string> runThreads(int N, const Scenario& scenario,
                                    std::chrono::milliseconds timeout = 20s, int slow = -1) {
  InprocHub hub(N, timeout);
  std::vector<std::string> results(N), errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      std::shared_ptr<Transport> transport = hub.connect(rank);
      if (rank == slow) transport = std::make_shared<SlowSends>(transport, 5ms);
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

// The metrics' counters (docs/metrics.md): units and tensors by kind, buffers and bytes by
// algorithm and wire, and the negotiation wait, in which the late rank waits least.
TEST(RuntimeInproc, WaitHistogramShowsWhoTheOthersWaitFor) {
  constexpr int N = 4, kSteps = 5, kLate = 2;
  std::vector<RuntimeStats> all(N);
  runThreads(N, [&](int rank, const Starter& start) {
    auto rt = start(testConfig());
    std::vector<float> data(1000, float(rank));
    for (int i = 0; i < kSteps; ++i) {
      if (rank == kLate) std::this_thread::sleep_for(std::chrono::milliseconds(40));
      rt->allreduce("g", f32(data), f32(data), Op::kSum).wait();
    }
    rt->barrier().wait();
    all[rank] = rt->stats();
    return std::string("ok");
  });
  const size_t allreduce = size_t(Kind::kAllreduce), ring = size_t(Algorithm::kRing);
  for (int rank = 0; rank < N; ++rank) {
    const RuntimeStats& s = all[rank];
    EXPECT_EQ(s.unitsByKind[allreduce], uint64_t(kSteps)) << rank;
    EXPECT_EQ(s.tensorsByKind[allreduce], uint64_t(kSteps)) << rank;
    EXPECT_EQ(s.unitsByKind[size_t(Kind::kBarrier)], 1u) << rank;
    EXPECT_EQ(s.allreduceBuffers[ring][size_t(Wire::kNone)], s.ringBuffers) << rank;
    EXPECT_EQ(s.allreduceBytesSent[ring][size_t(Wire::kNone)], s.bytesSent) << rank;
    EXPECT_EQ(s.negotiationWait.count, uint64_t(kSteps + 1)) << rank;  // and the barrier
    // One set (0), holding every unit; one transport wait per all-reduce, none for the barrier.
    ASSERT_EQ(s.bySet.size(), 1u) << rank;
    EXPECT_EQ(s.bySet[0].set, 0);
    EXPECT_EQ(s.bySet[0].unitsByKind, s.unitsByKind) << rank;
    EXPECT_EQ(s.bySet[0].allreduceBytesSent, s.allreduceBytesSent) << rank;
    EXPECT_EQ(s.transportWait.count, uint64_t(kSteps)) << rank;
    EXPECT_EQ(s.bytesReceived, s.bytesSent) << rank;  // the ring: as much in as out
    if (rank != kLate) {
      EXPECT_GT(s.negotiationWait.sumSeconds, 2 * all[kLate].negotiationWait.sumSeconds)
          << rank << " waited no longer than the late rank";
    }
  }
}

// The histogram's buckets: a bound holds what equals it; past the last, the overflow bucket.
// The transport wait (docs/metrics.md): a rank whose data links are slow inside the
// collectives, after the negotiation, makes the others block on it; it waits least itself.
TEST(RuntimeInproc, TransportWaitShowsWhoTheOthersWaitFor) {
  constexpr int N = 4, kSteps = 5, kSlow = 1;
  std::vector<RuntimeStats> all(N);
  runThreads(
      N,
      [&](int rank, const Starter& start) {
        auto rt = start(testConfig());
        std::vector<float> data(1 << 20, float(rank));  // 4 MiB: 1 MiB chunks on the ring
        for (int i = 0; i < kSteps; ++i) {
          rt->allreduce("g", f32(data), f32(data), Op::kSum).wait();
        }
        all[rank] = rt->stats();
        return std::string("ok");
      },
      20s, kSlow);
  for (int rank = 0; rank < N; ++rank) {
    EXPECT_EQ(all[rank].transportWait.count, uint64_t(kSteps)) << rank;
    EXPECT_EQ(all[rank].bytesReceived, all[rank].bytesSent) << rank;
    if (rank != kSlow) {
      // The slow rank's sends start 5 ms late, 2(N-1) of them per step at least.
      EXPECT_GT(all[rank].transportWait.sumSeconds,
                all[kSlow].transportWait.sumSeconds + 0.5 * kSteps * 2 * (N - 1) * 0.005)
          << rank << " waited no longer than the slow rank";
    }
  }
}

TEST(RuntimeInproc, WaitHistogramBuckets) {
  WaitHistogram h;
  h.add(0);
  h.add(kWaitBounds[0]);
  h.add(0.003);
  h.add(1e3);
  EXPECT_EQ(h.buckets[0], 2u);
  EXPECT_EQ(h.buckets[3], 1u);  // (0.0025, 0.005]
  EXPECT_EQ(h.buckets.back(), 1u);
  EXPECT_EQ(h.count, 4u);
  EXPECT_DOUBLE_EQ(h.sumSeconds, kWaitBounds[0] + 0.003 + 1e3);
}

// Per negotiation cycle every rank receives one control message from each child in the
// control tree and sends one to its parent, then receives the answer from its parent and
// sends it to each child; every byte sent is received (docs/scale.md). With fanout 2, 7 ranks
// make a full tree of depth 2: rank 0 handles 4 messages per cycle, not 12. The second half
// repeats the same names, so its cycles carry held bits only.
TEST(RuntimeInproc, ControlMessagesPerCycle) {
  constexpr int N = 7;
  std::vector<RuntimeStats> all(N);
  runThreads(N, [&](int rank, const Starter& start) {
    RuntimeConfig config = testConfig();
    config.controlFanout = 2;
    auto rt = start(config);
    for (int i = 0; i < 20; ++i) {
      std::vector<float> mine(50 + i % 10, float(rank));
      rt->allreduce("c" + std::to_string(i % 10), f32(mine), f32(mine), Op::kSum).wait();
      check(mine[0] == float(N * (N - 1) / 2), "rank ", rank, " got ", mine[0]);
    }
    rt->shutdown();  // every rank has run the same cycles now
    all[rank] = rt->stats();
    return std::string("ok");
  });
  uint64_t sent = 0, received = 0;
  for (int rank = 0; rank < N; ++rank) {
    const RuntimeStats& s = all[rank];
    const ControlTree tree{rank, N, 2};
    const uint64_t perCycle = tree.children().size() + (rank == 0 ? 0 : 1);
    EXPECT_EQ(s.cycles, all[0].cycles) << "rank " << rank;
    EXPECT_EQ(s.controlMessagesSent, perCycle * s.cycles) << "rank " << rank;
    EXPECT_EQ(s.controlMessagesReceived, perCycle * s.cycles) << "rank " << rank;
    EXPECT_GE(s.controlBytesSent, control_frame::kFrameBytes * s.controlMessagesSent);
    EXPECT_GE(s.controlBytesReceived, control_frame::kFrameBytes * s.controlMessagesReceived);
    sent += s.controlBytesSent;
    received += s.controlBytesReceived;
    EXPECT_EQ(s.rendezvousRequests, 0u);  // threads meet without a store
    EXPECT_GE(s.cacheHits, 10u) << "rank " << rank;
  }
  EXPECT_EQ(all[0].controlMessagesSent, 2 * all[0].cycles);
  EXPECT_EQ(sent, received);
}

TEST(RuntimeInproc, CacheHitsInSteadyLoop) { runThreads(4, cacheHits); }

TEST(RuntimeInproc, JoinWithUnevenSteps) { runThreads(4, joinUneven); }

// reducescatter (fused units, grouped, uneven rows, a rank with no rows), alltoall with uneven
// splits and zero blocks, a grouped allgather and a joined rank's refusals; all in flight at
// once, checked element by element.
TEST(RuntimeInproc, ReducescatterAlltoallGroupedAllgather) {
  runThreads(3, [](int rank, const Starter& start) {
    auto rt = start(testConfig());
    const int N = rt->size();
    const float r1 = float(rank + 1);
    // reducescatter: a (7 rows x 2) and a group of b (2 rows: rank 2 gets none) and c (3)
    std::vector<float> a(14), b(2, r1), c(3, 10 * r1);
    for (size_t e = 0; e < a.size(); ++e) a[e] = float(e) * r1;
    const int64_t aRows = scatterRows(7, rank, N), bRows = scatterRows(2, rank, N);
    std::vector<float> aOut(static_cast<size_t>(aRows) * 2), bOut(static_cast<size_t>(bRows)),
        cOut(1);
    Handle hA = rt->reducescatter({"rs.a"}, {view(a, {7, 2}, DType::kFloat32)},
                                  {view(aOut, {aRows, 2}, DType::kFloat32)}, Op::kSum);
    Handle hBC = rt->reducescatter(
        {"rs.b", "rs.c"}, {f32(b), f32(c)},
        {view(bOut, {bRows}, DType::kFloat32), view(cOut, {1}, DType::kFloat32)}, Op::kAverage,
        2.0, 0.5);
    // alltoall: rank i sends (i + j) % 3 rows of 2 int64 to rank j; its rows are 100 i + k
    std::vector<int64_t> splits(N);
    int64_t sent = 0;
    for (int j = 0; j < N; ++j) sent += splits[j] = (rank + j) % 3;
    std::vector<int64_t> rows(size_t(sent) * 2);
    for (size_t e = 0; e < rows.size(); ++e) rows[e] = 100 * rank + int64_t(e / 2);
    Handle hT = rt->alltoall("a2a", view(rows, {sent, 2}, DType::kInt64), splits);
    // grouped allgather: rank rows of x, 1 row of y
    std::vector<float> x(size_t(rank) * 2, r1), y(3, -r1);
    Handle hG = rt->groupedAllgather({"ga.x", "ga.y"}, {view(x, {rank, 2}, DType::kFloat32),
                                                        view(y, {1, 3}, DType::kFloat32)});
    for (const Handle* h : {&hA, &hBC, &hT, &hG}) h->wait();
    const float ranks = float(N * (N + 1) / 2);  // sum of r1
    const int64_t aStart = scatterOffset(7, rank, N);
    for (size_t e = 0; e < aOut.size(); ++e) {
      check(aOut[e] == float(size_t(aStart) * 2 + e) * ranks, "rs.a element ", e, ": ", aOut[e]);
    }
    for (float v : bOut) check(v == ranks * 2 * 0.5f / float(N), "rs.b: ", v);
    check(cOut[0] == 10 * ranks * 2 * 0.5f / float(N), "rs.c: ", cOut[0]);
    const auto& got = hT.output();
    std::vector<int64_t> expected;
    for (int i = 0; i < N; ++i) {
      int64_t first = 0;
      for (int j = 0; j < rank; ++j) first += (i + j) % 3;
      check(hT.receivedSplits().at(i) == (i + rank) % 3, "a2a splits from ", i);
      for (int64_t k = 0; k < (i + rank) % 3; ++k) {
        expected.push_back(100 * i + first + k);
        expected.push_back(100 * i + first + k);
      }
    }
    check(got.size() == expected.size() * 8 &&
              std::memcmp(got.data(), expected.data(), got.size()) == 0,
          "a2a rows");
    check(hT.outputShape() == std::vector<int64_t>{int64_t(expected.size() / 2), 2},
          "a2a shape");
    const auto& flat = hG.output();
    std::vector<float> want;
    for (int i = 0; i < N; ++i) want.insert(want.end(), size_t(i) * 2, float(i + 1));
    for (int i = 0; i < N; ++i) want.insert(want.end(), 3, -float(i + 1));
    check(flat.size() == want.size() * 4 && std::memcmp(flat.data(), want.data(), flat.size()) == 0,
          "grouped allgather");
    // With rank 0 joined, the others' scatters and gathers fail naming it; all-reduces run.
    if (rank == 0) {
      rt->join().wait();
    } else {
      std::vector<float> z(3, 1.0f), zOut(1);
      const Status refused = outcome(rt->reducescatter(
          {"j.rs"}, {f32(z)}, {view(zOut, {1}, DType::kFloat32)}, Op::kSum));
      check(refused.code == StatusCode::kInvalidArgument && refused.peer == 0,
            "reducescatter beside a joined rank: ", refused.message);
      const Status refusedA2a = outcome(rt->alltoall("j.a2a", f32(z), {}));
      check(refusedA2a.code == StatusCode::kInvalidArgument && refusedA2a.peer == 0,
            "alltoall beside a joined rank: ", refusedA2a.message);
      rt->allreduce("j.sum", f32(z), f32(z), Op::kSum).wait();
      check(z[0] == float(N - 1), "allreduce beside a joined rank: ", z[0]);
      rt->join().wait();
    }
    return std::string("ok");
  });
}

TEST(RuntimeInproc, TimelineParses) {
  const std::string pattern = ::testing::TempDir() + "cerar_inproc_timeline_{rank}.json";
  runThreads(2, [&](int rank, const Starter& start) { return timeline(rank, start, pattern); });
}

TEST(RuntimeInproc, StallReportNamesMissingRank) { runThreads(3, stallReport); }

TEST(RuntimeInproc, CachedStallReportNamesMissingRank) { runThreads(3, cachedStallReport); }

TEST(RuntimeInproc, MismatchFailsEveryRank) { runThreads(4, mismatch); }

TEST(RuntimeInproc, ShutdownWithWorkPending) { runThreads(4, shutdownPending); }

// Rank k's first "dup<k>" cannot complete before its duplicate is tried: the other rank
// submits that name only afterwards (when both ranks raced, the first sometimes completed
// before the second call under load, and nothing was in flight to refuse).
TEST(RuntimeInproc, DuplicateNameAndBadArgumentsFailAtOnce) {
  std::promise<void> tried[2];
  std::shared_future<void> triedBy[2] = {tried[0].get_future().share(),
                                         tried[1].get_future().share()};
  runThreads(2, [&](int rank, const Starter& start) {
    auto rt = start(testConfig());
    std::vector<float> v(4, 1);
    std::vector<int32_t> ints(4, 1);
    for (int k = 0; k < 2; ++k) {
      const std::string name = k == 0 ? "dup0" : "dup1";
      if (rank != k) {
        check(triedBy[k].wait_for(20s) == std::future_status::ready, "rank ", k, " never tried");
        rt->allreduce(name, f32(v), f32(v), Op::kSum).wait();
        continue;
      }
      Handle first = rt->allreduce(name, f32(v), f32(v), Op::kSum);
      // What the frameworks ask first: the same refusal, in this set only.
      const Status asked = rt->inFlight({"other", name}, 0);
      check(asked.code == StatusCode::kInvalidArgument &&
                asked.message.find("'" + name + "' is already in flight on rank " +
                                   std::to_string(rank)) != std::string::npos, asked.message);
      check(rt->inFlight({"other"}, 0).ok(), "a name never enqueued is in flight");
      bool called = false;
      Handle second = rt->allreduce(name, f32(v), f32(v), Op::kSum,
                                    1.0, 1.0, [&](const Status& s) { called = !s.ok(); });
      const bool refused = second.poll() && called;
      const std::string why = failure(second);
      tried[k].set_value();
      check(refused, "duplicate not refused at once");
      check(why == asked.message, why);
      first.wait();
      check(rt->inFlight({name}, 0).ok(), "a completed name still in flight");
    }
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

// CERAR_COMPRESSION=bf16: a float32 sum takes the exact ring with a bf16 wire (even under
// CERAR_ALGORITHM=cerar), identical on every rank, at half the bytes; float64 keeps its own.
TEST(RuntimeInproc, JobWideCompressionHalvesFloat32Bytes) {
  const auto results = runThreads(3, [](int rank, const Starter& start) {
    RuntimeConfig config = testConfig();
    config.algorithm = "cerar";
    config.components = 12;
    config.compression = "bf16";
    auto rt = start(config);
    std::vector<float> data(3000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = 1.0f + float(i % 7) / 3.0f + rank;
    rt->allreduce("grad", f32(data), f32(data), Op::kSum).wait();
    RuntimeStats s = rt->stats();
    check(s.wireBuffers == 1 && s.ringBuffers == 1 && s.cerarBuffers == 0, "wire buffers ",
          s.wireBuffers, " ring ", s.ringBuffers);
    check(s.bytesSent == makeRingPlan(3, data.size(), rank).elementsSent() * 2, "bytes ",
          s.bytesSent);
    for (size_t i = 0; i < data.size(); ++i) {
      const float exact = 3.0f * (1.0f + float(i % 7) / 3.0f) + 3.0f;
      check(std::abs(data[i] - exact) <= 1.01 * (3 * 0x1p-8 + 2 * 0x1p-24) * exact, "element ",
            i, ": ", data[i], " vs ", exact);
    }
    std::vector<double> wide(data.begin(), data.end());  // float64: no wire
    rt->allreduce("wide", view(wide, {int64_t(wide.size())}, DType::kFloat64),
                  view(wide, {int64_t(wide.size())}, DType::kFloat64), Op::kSum).wait();
    s = rt->stats();
    check(s.wireBuffers == 1 && s.fusedBuffers == 2, "float64 took a wire");
    return std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  });
  for (const auto& r : results) EXPECT_EQ(r, results[0]);  // bit-identical on every rank
}

// CERAR_ERROR_FEEDBACK with the int8 wire: one gradient all-reduced K times. Rounding to
// nearest loses about the same each step, so without feedback the summed results drift from
// K exact sums by K steps' errors; with it by about one step's. A reshaped name starts afresh:
// its first result is bit for bit the one without feedback.
TEST(RuntimeInproc, ErrorFeedbackSendsWireLossesWithTheNextStep) {
  constexpr int N = 3, K = 8;
  std::vector<double> drift(2);
  std::vector<std::string> reshaped(2);
  for (bool feedback : {false, true}) {
    const auto results = runThreads(N, [&](int rank, const Starter& start) {
      RuntimeConfig config = testConfig();
      config.algorithm = "ring";
      config.compression = "int8";
      config.errorFeedback = feedback;
      auto rt = start(config);
      std::vector<std::vector<float>> grads(N, std::vector<float>(3000));
      for (int r = 0; r < N; ++r) {
        std::mt19937 gen(r + 11);
        std::normal_distribution<float> normal(0, 1);
        for (auto& x : grads[r]) x = 0.5f + normal(gen);
      }
      std::vector<double> total(3000, 0.0);
      double first = 0, scale = 0;
      for (int k = 0; k < K; ++k) {
        std::vector<float> data = grads[rank];
        rt->allreduce("grad", f32(data), f32(data), Op::kSum).wait();
        for (size_t i = 0; i < data.size(); ++i) {
          total[i] += data[i];
          const double exact = double(grads[0][i]) + grads[1][i] + grads[2][i];
          if (k == 0) first = std::max(first, std::fabs(data[i] - exact));
          scale = std::max(scale, std::fabs(exact));
        }
      }
      double worst = 0;
      for (size_t i = 0; i < total.size(); ++i) {
        const double exact = double(grads[0][i]) + grads[1][i] + grads[2][i];
        worst = std::max(worst, std::fabs(total[i] - K * exact));
      }
      check(first > 1e-3 * scale, "int8 should lose something: ", first / scale);
      std::vector<float> smaller(grads[rank].begin(), grads[rank].begin() + 2000);
      rt->allreduce("grad", f32(smaller), f32(smaller), Op::kSum).wait();
      const RuntimeStats s = rt->stats();
      check(s.wireBuffers == K + 1, "wire buffers ", s.wireBuffers);
      return std::to_string(worst / first) + " " +
             std::string(reinterpret_cast<const char*>(smaller.data()), smaller.size() * 4);
    });
    for (const auto& r : results) EXPECT_EQ(r, results[0]);  // identical on every rank
    drift[feedback] = std::stod(results[0]);
    reshaped[feedback] = results[0].substr(results[0].find(' '));
  }
  EXPECT_GT(drift[0], K / 2.0) << "K steps without feedback: " << drift[0] << " x one step's";
  EXPECT_LT(drift[1], 2.0) << "K steps with feedback: " << drift[1] << " x one step's";
  EXPECT_EQ(reshaped[0], reshaped[1]);
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

// Ranks declared as 2 hosts of 2 (startWith's blocks of localSize): Horovod's local and cross
// ranks follow, and with CERAR_HIERARCHICAL_ALLREDUCE=1 set 0's sums run host by host, the
// same bits on every rank and exact on integer values; a process set's stay flat.
TEST(RuntimeInproc, HostByHostWhereDeclaredLayered) {
  auto results = runThreads(4, [](int rank, const Starter& start) {
    RuntimeConfig config = testConfig();
    config.localSize = 2;
    config.localRank = rank % 2;
    config.hierarchicalAllreduce = "1";
    auto rt = start(config);
    check(rt->localRank() == rank % 2 && rt->localSize() == 2 && rt->crossRank() == rank / 2 &&
              rt->crossSize() == 2 && rt->isHomogeneous(),
          "topology ", rt->localRank(), " ", rt->crossRank());
    std::vector<float> ints(1001), grads(4099);
    for (size_t e = 0; e < ints.size(); ++e) ints[e] = float((e + size_t(rank)) % 7);
    std::mt19937 gen(rank);
    std::normal_distribution<float> normal(0, 1);
    for (float& g : grads) g = normal(gen);
    auto a = rt->allreduce("ints", f32(ints), f32(ints), Op::kSum);
    auto b = rt->allreduce("grads", f32(grads), f32(grads), Op::kAverage);
    a.wait();
    b.wait();
    for (size_t e = 0; e < ints.size(); ++e) {
      float want = 0;
      for (int r = 0; r < 4; ++r) want += float((e + size_t(r)) % 7);
      check(ints[e] == want, "element ", e, ": ", ints[e], " != ", want);
    }
    const RuntimeStats s = rt->stats();
    check(s.hierarchicalBuffers >= 1 && s.hierarchicalBuffers == s.fusedBuffers,
          "host-by-host buffers ", s.hierarchicalBuffers, " of ", s.fusedBuffers);
    std::string bits(reinterpret_cast<const char*>(grads.data()), grads.size() * 4);
    return bits;
  });
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
}

}  // namespace
}  // namespace cerar
