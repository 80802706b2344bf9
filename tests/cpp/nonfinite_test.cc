// CERAR keeps the exact ring's semantics for NaN, +-Inf and sums that overflow
// (cerar-protocol.md, "Non-finite and near-overflow inputs"): on every rank the set of
// non-finite outputs equals the exact ring's, through the engine API and through the runtime
// (fused, grouped, device buffers), and a gradient scaler skips a step on all ranks together.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "core/execution/scaling.h"
#include "host_device_ops.h"
#include "ops/algorithms/plan.h"
#include "ops/algorithms/share_correction.h"
#include "ops/codec/range.h"
#include "runtime_scenarios.h"
#include "simulate.h"

namespace cerar {
namespace {

using scenarios::check;
using scenarios::f32;
using scenarios::testConfig;
using testing::correlatedInputs;
using testing::simulate;

template <typename T>
std::set<size_t> nonFinite(const T* data, size_t n) {
  std::set<size_t> at;
  for (size_t e = 0; e < n; ++e)
    if (!std::isfinite(data[e])) at.insert(e);
  return at;
}

// NaN, +Inf and -Inf, `count` of them, at random elements of random ranks.
template <typename T>
void plant(std::vector<std::vector<T>>& buffers, int count, std::mt19937& rng) {
  const T values[] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                      -std::numeric_limits<T>::infinity()};
  for (int k = 0; k < count; ++k) {
    auto& buffer = buffers[rng() % buffers.size()];
    buffer[rng() % buffer.size()] = values[k % 3];
  }
}

AllreduceOptions options(Algorithm algorithm, int c) {
  AllreduceOptions o;
  o.algorithm = algorithm;
  o.components = c;
  return o;
}

// The exact ring on a copy, CERAR on the inputs; the non-finite sets must match on every rank.
template <typename T>
void expectRingSets(std::vector<std::vector<T>> buffers, int c, bool expectFallback) {
  auto ring = buffers;
  simulate(ring, options(Algorithm::kRing, 0));
  const auto stats = simulate(buffers, options(Algorithm::kCerar, c)).stats;
  for (size_t rank = 0; rank < buffers.size(); ++rank) {
    ASSERT_EQ(nonFinite(buffers[rank].data(), buffers[rank].size()),
              nonFinite(ring[rank].data(), ring[rank].size()))
        << "c=" << c << " rank " << rank;
    ASSERT_EQ(stats[rank].nonFiniteFallback, expectFallback) << "c=" << c << " rank " << rank;
  }
}

template <typename T>
void engineMatchesRing(unsigned seed) {
  const int N = 4;
  std::mt19937 rng(seed);
  for (int c : {N, 2 * N, 4 * N, 16 * N}) {
    auto buffers = correlatedInputs<T>(N, 4099, seed + c);
    plant(buffers, 1 + int(rng() % 6), rng);
    expectRingSets(buffers, c, c > N);  // c = N is the ring itself: nothing to check
  }
}

TEST(NonFinite, EngineMatchesExactRingAtEveryC) {
  for (unsigned seed : {1u, 2u, 3u}) {
    engineMatchesRing<float>(seed);
    engineMatchesRing<double>(seed);
  }
}

// What the check prevents: unchecked, CERAR spreads one NaN to the coupled elements (those
// at its offset in the other slices of its chunk).
TEST(NonFinite, UncheckedCerarSpreadsNaN) {
  const int N = 4, c = 16;
  auto buffers = correlatedInputs<float>(N, 1024, 5);
  buffers[2][100] = std::numeric_limits<float>::quiet_NaN();
  AllreduceOptions unchecked = options(Algorithm::kCerar, c);
  unchecked.exactOnNonFinite = false;
  simulate(buffers, unchecked);
  EXPECT_GT(nonFinite(buffers[0].data(), buffers[0].size()).size(), 1u);
}

// Finite data: the check changes no bit, and no rank falls back.
TEST(NonFinite, FiniteDataBitIdenticalWithAndWithoutCheck) {
  const int N = 4, c = 32;
  auto checked = correlatedInputs<float>(N, 10007, 9);
  auto unchecked = checked;
  AllreduceOptions off = options(Algorithm::kCerar, c);
  off.exactOnNonFinite = false;
  const auto stats = simulate(checked, options(Algorithm::kCerar, c)).stats;
  simulate(unchecked, off);
  for (int rank = 0; rank < N; ++rank) {
    EXPECT_FALSE(stats[rank].nonFiniteFallback);
    EXPECT_EQ(std::memcmp(checked[rank].data(), unchecked[rank].data(), 10007 * sizeof(float)),
              0);
  }
}

// Without the parameter agreement (as the runtime calls it), the verdict rides in band on
// CERAR's first N-1 rounds: a NaN on any one rank stops every rank before round N and the
// output is the exact ring's bit for bit; finite data run CERAR unchanged. Short buffers (empty
// messages) and small segments (many per round) included.
TEST(NonFinite, InBandVerdictMatchesExactRingBitForBit) {
  for (int N : {2, 3, 4}) {
    for (int c : {2 * N, 16 * N}) {
      for (size_t d : {size_t(1), size_t(c - 1), size_t(4099)}) {
        for (size_t segmentBytes : {size_t(64), Executor::kDefaultSegmentBytes}) {
          AllreduceOptions inBand = options(Algorithm::kCerar, c);
          inBand.verifyParameters = false;
          AllreduceOptions unchecked = inBand;
          unchecked.exactOnNonFinite = false;
          const auto inputs = correlatedInputs<float>(N, d, unsigned(N * c + d));
          auto finite = inputs, reference = inputs;
          const auto stats = simulate(finite, inBand, segmentBytes).stats;
          simulate(reference, unchecked, segmentBytes);
          for (int rank = 0; rank < N; ++rank) {
            ASSERT_FALSE(stats[rank].nonFiniteFallback);
            ASSERT_EQ(std::memcmp(finite[rank].data(), reference[rank].data(), d * 4), 0);
          }
          for (int bad = 0; bad < N; ++bad) {
            auto planted = inputs;
            planted[bad][(d * 7) / 11] = std::numeric_limits<float>::quiet_NaN();
            auto ring = planted;
            simulate(ring, options(Algorithm::kRing, 0), segmentBytes);
            const auto fellBack = simulate(planted, inBand, segmentBytes).stats;
            for (int rank = 0; rank < N; ++rank) {
              ASSERT_TRUE(fellBack[rank].nonFiniteFallback) << "N=" << N << " c=" << c;
              ASSERT_EQ(std::memcmp(planted[rank].data(), ring[rank].data(), d * 4), 0)
                  << "N=" << N << " c=" << c << " d=" << d << " rank " << rank;
            }
          }
        }
      }
    }
  }
}

// Ranks that disagree on the check would post different transfers: parameter agreement
// fails every rank first, naming the setting.
TEST(NonFinite, RanksDisagreeingOnTheCheckFailTogether) {
  const int N = 3;
  InprocHub hub(N, std::chrono::seconds(20));
  std::vector<std::string> errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      Communicator communicator(hub.connect(rank));
      std::vector<float> data(100, 1.0f);
      AllreduceOptions o = options(Algorithm::kCerar, 2 * N);
      o.exactOnNonFinite = rank != 1;
      try {
        communicator.allreduce(data.data(), data.size(), DType::kFloat32, o);
      } catch (const Error& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < N; ++rank)
    EXPECT_NE(errors[rank].find("non-finite check off"), std::string::npos) << errors[rank];
}

// Finite inputs whose sum overflows: the ring gives Inf in that element only; unchecked CERAR
// would turn its coupled elements into NaN (Inf - Inf in the home's decode).
TEST(NonFinite, SumsThatOverflowMatchExactRing) {
  const int N = 4;
  for (int c : {2 * N, 16 * N}) {
    auto buffers = correlatedInputs<float>(N, 2048, 4);
    for (auto& b : buffers) b[77] = std::numeric_limits<float>::max() / 2;
    expectRingSets(buffers, c, true);
    auto doubles = correlatedInputs<double>(N, 2048, 4);
    for (auto& b : doubles) b[5] = -std::numeric_limits<double>::max() / 3;
    expectRingSets(doubles, c, true);
  }
}

// The range limit: 2^(emax + 1 - guard) with guard = ceil(log2 N) + 1; the packing copy's
// fused test agrees with the plain one and copies every bit.
template <typename T>
void rangeLimitExact(int N) {
  const int guard = codec::rangeGuardBits(N);
  const T limit = std::ldexp(T(1), std::numeric_limits<T>::max_exponent - guard);
  ASSERT_GE(std::ldexp(1.0L, guard - 1), (long double)N);
  ASSERT_LT(std::ldexp(1.0L, guard - 2), (long double)N);
  const DType dtype = testing::dtypeOf<T>();
  auto beyond = [&](T x) {
    T copy = 0;
    const bool fused = scaledCopyChecked(dtype, &x, &copy, 1, 1.0, N);
    EXPECT_EQ(std::memcmp(&copy, &x, sizeof(T)), 0);
    EXPECT_EQ(fused, codec::beyondCerarRange(dtype, &x, 1, N));
    return fused;
  };
  const T below = std::nextafter(limit, T(0));
  EXPECT_FALSE(beyond(below));
  EXPECT_FALSE(beyond(-below));
  EXPECT_FALSE(beyond(0));
  EXPECT_FALSE(beyond(std::numeric_limits<T>::denorm_min()));
  EXPECT_TRUE(beyond(limit));
  EXPECT_TRUE(beyond(-limit));
  EXPECT_TRUE(beyond(std::numeric_limits<T>::max()));
  EXPECT_TRUE(beyond(std::numeric_limits<T>::infinity()));
  EXPECT_TRUE(beyond(-std::numeric_limits<T>::infinity()));
  EXPECT_TRUE(beyond(std::numeric_limits<T>::quiet_NaN()));
  // A prescale that overflows is caught on the value written.
  T x = below, out = 0;
  EXPECT_TRUE(scaledCopyChecked(dtype, &x, &out, 1, 4.0, N));
}

TEST(NonFinite, RangeLimitIsExact) {
  for (int N : {2, 3, 4, 5, 16, 1000}) {
    rangeLimitExact<float>(N);
    rangeLimitExact<double>(N);
  }
}

// A huge finite outlier (docs/fidelity.md, "What each rank ends with"): CERAR keeps it, and only the
// elements at its offset in the other slices of its chunk move, within the spec's bound
// relative to the largest sum of magnitudes in the buffer; every other element is unchanged.
TEST(NonFinite, FiniteOutlierConfinedToCoupledElements) {
  const int N = 4, c = 16;
  const size_t d = 1 << 16, at = 5000;
  const float outlier = 1e30f;
  const Layout layout(N, c, d);
  auto inputs = correlatedInputs<float>(N, d, 12);
  auto clean = inputs;
  simulate(clean, options(Algorithm::kCerar, c));
  inputs[1][at] = outlier;
  std::vector<testing::Reference> sum, magnitude;
  testing::exactSums(inputs, sum, magnitude);
  auto result = inputs;
  simulate(result, options(Algorithm::kCerar, c));
  // The coupled elements: the outlier's offset in every slice of its chunk.
  std::set<size_t> coupled;
  for (int k = 0; k < c; ++k) {
    const Range home = layout.component(k);
    if (at >= home.offset && at < home.offset + home.length) {
      const int tau = k / layout.r();
      for (int l = 0; l < layout.r(); ++l)
        coupled.insert(layout.slice(tau, l).offset + at - home.offset);
    }
  }
  ASSERT_EQ(coupled.size(), size_t(layout.r()));
  const double scale = double(*std::max_element(magnitude.begin(), magnitude.end()));
  const double bound = predictedErrorBound(N, c, defaultEps(DType::kFloat32), DType::kFloat32);
  double worstCoupled = 0, worstSelf = 0;
  for (int rank = 0; rank < N; ++rank) {
    for (size_t e = 0; e < d; ++e) {
      const double error = std::abs(double(result[rank][e]) - double(sum[e]));
      if (e == at) {
        worstSelf = std::max(worstSelf, error / std::abs(double(sum[e])));
      } else if (coupled.count(e)) {
        worstCoupled = std::max(worstCoupled, error);
      } else {
        ASSERT_EQ(result[rank][e], clean[rank][e]) << "rank " << rank << " element " << e;
      }
    }
  }
  EXPECT_LE(worstCoupled, 2 * bound * scale);  // the spec allows a factor 2 in tests
  EXPECT_LE(worstSelf, 1e-6);
  std::printf("outlier %g on one rank (N=%d, c=%d, eps=2^-11): coupled elements' error up to "
              "%.3g = %.3g of the largest |g| sum (bound %.3g); the outlier's own relative "
              "error %.3g; %zu other elements unchanged\n",
              double(outlier), N, c, worstCoupled, worstCoupled / scale, bound, worstSelf,
              d - coupled.size());
}

// Large packing copies take the streaming path (core/execution/scaling.cc): the same bits and the same
// verdict wherever the value lies (head before alignment, vector body, tail).
template <typename T>
void streamingCopyExact() {
  const size_t n = (size_t(4) << 20) / sizeof(T) + 7;
  std::vector<T> in(n), out(n + 2);
  for (size_t i = 0; i < n; ++i) in[i] = T(i % 1000) - T(500.5);
  const DType dtype = testing::dtypeOf<T>();
  for (size_t shift : {0, 1}) {  // the destination 16-byte aligned or not
    T* dst = out.data() + shift;
    EXPECT_FALSE(scaledCopyChecked(dtype, in.data(), dst, n, 1.0, 4));
    EXPECT_EQ(std::memcmp(dst, in.data(), n * sizeof(T)), 0);
    const T bad[] = {std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN(),
                     -std::numeric_limits<T>::max()};
    int k = 0;
    for (size_t at : {size_t(0), size_t(1), n / 2, n / 2 + 9, n - 2, n - 1}) {
      const T saved = in[at];
      in[at] = bad[k++ % 3];
      EXPECT_TRUE(scaledCopyChecked(dtype, in.data(), dst, n, 1.0, 4)) << at;
      EXPECT_EQ(std::memcmp(dst, in.data(), n * sizeof(T)), 0);
      in[at] = saved;
    }
    // In the vector body, the limit itself is flagged and the value just below it is not.
    const T limit =
        std::ldexp(T(1), std::numeric_limits<T>::max_exponent - codec::rangeGuardBits(4));
    for (size_t at : {n / 3, n / 3 + 5}) {
      const T saved = in[at];
      in[at] = -limit;
      EXPECT_TRUE(scaledCopyChecked(dtype, in.data(), dst, n, 1.0, 4)) << at;
      in[at] = std::nextafter(limit, T(0));
      EXPECT_FALSE(scaledCopyChecked(dtype, in.data(), dst, n, 1.0, 4)) << at;
      EXPECT_EQ(std::memcmp(dst, in.data(), n * sizeof(T)), 0);
      in[at] = saved;
    }
  }
}

TEST(NonFinite, StreamingPackingCopyExact) {
  streamingCopyExact<float>();
  streamingCopyExact<double>();
}

// --- the runtime ---------------------------------------------------------------------------

using RankBody = std::function<void(int rank, Runtime& rt)>;

RuntimeConfig cerarConfig(int c) {
  RuntimeConfig config = testConfig();
  config.algorithm = "cerar";
  config.components = c;
  return config;
}

// N ranks as threads, each with a runtime of `config` (device faked in host memory); fails
// the test with every rank's error.
void runRanks(int N, const RuntimeConfig& config, const RankBody& body) {
  InprocHub hub(N, std::chrono::seconds(20));
  std::vector<std::string> errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      RuntimeConfig mine = config;
      mine.deviceOps = testing::hostDeviceOps(std::make_shared<testing::FakeDeviceLog>());
      try {
        auto rt = Runtime::startWith(mine, hub.connect(rank));
        body(rank, *rt);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < N; ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

// Tensors of every rank for one step, from a seed shared by all ranks; NaN/+-Inf planted on
// random ranks. `planted` gets, per tensor, the elements where the exact ring's output is
// non-finite: the planted ones (finite sums of these inputs cannot overflow).
std::vector<std::vector<float>> stepTensors(int rank, int N, unsigned seed, int plants,
                                            std::vector<std::set<size_t>>& planted) {
  const size_t sizes[] = {3001, 517, 700, 1200, 64};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<std::vector<float>> mine;
  planted.assign(std::size(sizes), {});
  for (size_t t = 0; t < std::size(sizes); ++t) {
    std::vector<std::vector<float>> all(N, std::vector<float>(sizes[t]));
    for (auto& v : all)
      for (auto& x : v) x = 1.0f + normal(rng);
    mine.push_back(all[rank]);
  }
  const float values[] = {std::nanf(""), HUGE_VALF, -HUGE_VALF};
  for (int k = 0; k < plants; ++k) {
    const int who = int(rng() % N);
    const size_t t = rng() % std::size(sizes), e = rng() % sizes[t];
    planted[t].insert(e);
    if (who == rank) mine[t][e] = values[k % 3];
  }
  return mine;
}

// One step: tensors 0-1 as allreduces in flight together (fused when ready in one cycle), 2
// averaged alone, 3-4 as one group (always one buffer). `device`: the fake device's memory.
void reduceStep(Runtime& rt, std::vector<std::vector<float>>& tensors, int step, bool device) {
  auto tensor = [&](size_t t) {
    Tensor v = f32(tensors[t]);
    if (device) v.device = 0;
    return v;
  };
  const std::string tag = std::to_string(step);
  Handle a = rt.allreduce("a" + tag, tensor(0), tensor(0), Op::kSum, 2.0, 0.5);
  Handle b = rt.allreduce("b" + tag, tensor(1), tensor(1), Op::kSum, 2.0, 0.5);
  Handle average = rt.allreduce("avg" + tag, tensor(2), tensor(2), Op::kAverage);
  Handle g = rt.groupedAllreduce({"g0" + tag, "g1" + tag}, {tensor(3), tensor(4)},
                                 {tensor(3), tensor(4)}, Op::kSum);
  for (Handle* h : {&a, &b, &average, &g}) h->wait();
}

enum class Memory { kHost, kDevice, kMixed };  // kMixed: odd ranks' tensors on the device

void fusedAndGrouped(int c, Memory memory) {
  const int N = 4;
  runRanks(N, cerarConfig(c), [&](int rank, Runtime& rt) {
    const bool device = memory == Memory::kDevice || (memory == Memory::kMixed && rank % 2);
    for (int step = 0; step < 3; ++step) {
      std::vector<std::set<size_t>> ring;
      auto tensors = stepTensors(rank, N, 100 * c + step, step == 0 ? 0 : 3 * step, ring);
      reduceStep(rt, tensors, step, device);
      for (size_t t = 0; t < tensors.size(); ++t) {
        const auto got = nonFinite(tensors[t].data(), tensors[t].size());
        check(got == ring[t], "c=", c, " step ", step, " tensor ", t, ": ", got.size(),
              " non-finite outputs, the ring has ", ring[t].size());
      }
    }
    rt.barrier().wait();
    // c = N is the ring itself and needs no fallback; step 0 is finite and needs none.
    const RuntimeStats s = rt.stats();
    // A fallback counts as the ring buffer it ran.
    check(s.cerarBuffers > 0 && (s.nonFiniteFallbacks > 0) == (c > N) &&
              s.ringBuffers >= s.nonFiniteFallbacks,
          "cerar buffers ", s.cerarBuffers, ", ring buffers ", s.ringBuffers, ", fallbacks ",
          s.nonFiniteFallbacks);
  });
}

TEST(NonFiniteRuntime, FusedAndGroupedMatchExactRing) {
  for (int c : {4, 16, 64}) fusedAndGrouped(c, Memory::kHost);
}

TEST(NonFiniteRuntime, DeviceBuffersMatchExactRing) {
  fusedAndGrouped(16, Memory::kDevice);
  fusedAndGrouped(32, Memory::kMixed);
}

// A gradient scaler: skip the step when any reduced gradient is non-finite. Overflow planted
// on one rank at some steps; every rank must skip exactly those steps, and see the overflow in
// that one element only.
TEST(NonFiniteRuntime, GradientScalerSkipsOnEveryRankTogether) {
  const int N = 4, steps = 8;
  std::vector<std::vector<int>> skipped(N);
  std::vector<int> overflowing;
  for (int step = 0; step < steps; ++step)
    if (step % 3 == 1) overflowing.push_back(step);
  runRanks(N, cerarConfig(32), [&](int rank, Runtime& rt) {
    for (int step = 0; step < steps; ++step) {
      const bool overflow = step % 3 == 1;
      std::vector<std::set<size_t>> unused;
      auto grads = stepTensors(rank, N, 7 + step, 0, unused);
      const size_t t = step % grads.size(), e = (step * 131) % grads[t].size();
      if (overflow && rank == step % N) grads[t][e] = HUGE_VALF;
      reduceStep(rt, grads, step, false);
      size_t nonFiniteCount = 0;
      for (const auto& g : grads) nonFiniteCount += nonFinite(g.data(), g.size()).size();
      if (nonFiniteCount > 0) skipped[rank].push_back(step);
      check(nonFiniteCount == (overflow ? 1u : 0u) && (!overflow || std::isinf(grads[t][e])),
            "step ", step, ": ", nonFiniteCount, " non-finite gradients");
    }
  });
  for (int rank = 0; rank < N; ++rank) EXPECT_EQ(skipped[rank], overflowing) << "rank " << rank;
}

// Debug error mode: a buffer that fell back is the ring's result, so nothing is measured.
TEST(NonFiniteRuntime, DebugErrorSkipsFallbackBuffers) {
  RuntimeConfig config = cerarConfig(16);
  config.debugError = true;
  runRanks(4, config, [](int rank, Runtime& rt) {
    std::vector<float> data(4096, 1.0f + rank);
    if (rank == 1) data[9] = std::nanf("");
    rt.allreduce("nan", f32(data), f32(data), Op::kSum).wait();
    data.assign(4096, 1.0f);
    rt.allreduce("finite", f32(data), f32(data), Op::kSum).wait();
    const RuntimeStats s = rt.stats();
    check(s.nonFiniteFallbacks == 1 && s.measuredBuffers == 1 &&
              std::isfinite(s.measuredErrorMax),
          "fallbacks ", s.nonFiniteFallbacks, ", measured ", s.measuredBuffers, " max ",
          s.measuredErrorMax);
  });
}

}  // namespace
}  // namespace cerar
