// The autotuner's walk on synthetic step times: it finds the optimum of the grid, freezes
// there, discards warm-up and mixed steps, skips c where CERAR did not run at the best point, and its log lines.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>

#include "core/policy/autotune.h"
#include "common/error.h"

namespace cerar {
namespace {

constexpr uint64_t kMiB = 1u << 20;
constexpr double kStepBytes = 100.0 * kMiB;

// Seconds per step at a point: a bowl in log space with its minimum at 16 MiB, 2 ms, scale 2.
double bowl(const TuningPoint& p) {
  const double t = std::log2(double(p.thresholdBytes) / kMiB + 0.5) - std::log2(16.5);
  const double c = std::log2(p.cycleTimeMs / 2);
  const double s = std::log2(p.componentsScale / 2);
  return 0.3 + 0.01 * t * t + 0.02 * c * c + 0.015 * s * s;
}

// Drives `tuner` like a training loop: each step submits four tensors over two cycles, and
// lasts stepSeconds(point in force at its start, step index); its buffers ran CERAR where
// cerarAt(that point). Returns the samples seen.
using CerarAt = std::function<bool(const TuningPoint&)>;
std::vector<AutotuneSample> train(Autotuner& tuner, int steps,
                                  const std::function<double(const TuningPoint&, int)>& stepSeconds,
                                  const CerarAt& cerarAt = [](const TuningPoint&) { return true; }) {
  std::vector<AutotuneSample> samples;
  double now = 10.0;
  for (int step = 0; step < steps; ++step) {
    const double length = stepSeconds(tuner.current(), step);
    const bool cerarRan = cerarAt(tuner.current());
    for (auto names : {std::vector<std::string>{"a", "b"}, std::vector<std::string>{"c", "d"}}) {
      if (auto s = tuner.record(names, kStepBytes / 2, cerarRan, now)) samples.push_back(*s);
      now += length / 2;
    }
  }
  return samples;
}

TEST(Autotune, FindsTheOptimumAndFreezesThere) {
  AutotuneOptions options;
  options.warmupSamples = 2;
  options.stepsPerSample = 3;
  const TuningPoint start{64 * kMiB, 1.0, 1.0};
  Autotuner tuner(options, start);
  const auto samples = train(tuner, 200, [](const TuningPoint& p, int) { return bowl(p); });

  ASSERT_TRUE(tuner.frozen());
  const TuningPoint optimum{16 * kMiB, 2.0, 2.0};
  EXPECT_EQ(tuner.best(), optimum);
  EXPECT_EQ(tuner.current(), optimum);
  EXPECT_EQ(tuner.state(), (TuningState{optimum, false, true}));
  EXPECT_NEAR(tuner.bestScore(), kStepBytes / bowl(optimum), 1e-6 * kStepBytes);

  // Warm-up at the start point first, then one sample per distinct grid point of the four
  // sweeps (9 thresholds at 1 ms, 6 cycle times, 9 thresholds at 2 ms, 6 scales; each
  // sweep's best is measured once).
  ASSERT_EQ(samples.size(), size_t(2 + 9 + 5 + 8 + 5));
  EXPECT_TRUE(samples[0].warmup && samples[1].warmup);
  EXPECT_EQ(samples[0].point, start);
  std::set<TuningPoint> scored;
  for (size_t i = 2; i < samples.size(); ++i) {
    EXPECT_FALSE(samples[i].warmup);
    EXPECT_TRUE(scored.insert(samples[i].point).second) << "a point scored twice";
    // No mixed step: every sample's score is exactly its point's throughput.
    EXPECT_NEAR(samples[i].score, kStepBytes / bowl(samples[i].point), 1e-6 * kStepBytes);
    EXPECT_EQ(samples[i].frozeAfter, i + 1 == samples.size());
  }
  // Steps until frozen: the first (it has no start), three per sample, and one settling step
  // per change of point (after the warm-up and after each scored sample but the last).
  const int n = int(samples.size());
  EXPECT_EQ(tuner.steps(), 1 + 3 * n + 1 + (n - 2 - 1));

  // Frozen means frozen: nothing moves any more.
  const int steps = tuner.steps();
  EXPECT_TRUE(train(tuner, 20, [](const TuningPoint&, int) { return 0.01; }).empty());
  EXPECT_EQ(tuner.current(), optimum);
  EXPECT_EQ(tuner.steps(), steps);
}

TEST(Autotune, MedianIgnoresAnOddSlowStep) {
  AutotuneOptions options;
  options.warmupSamples = 0;
  options.stepsPerSample = 5;
  Autotuner tuner(options, {});
  // Every seventh step is ten times slower (another job on the machine).
  train(tuner, 400, [](const TuningPoint& p, int step) { return bowl(p) * (step % 7 ? 1 : 10); });
  ASSERT_TRUE(tuner.frozen());
  EXPECT_EQ(tuner.best(), (TuningPoint{16 * kMiB, 2.0, 2.0}));
}

TEST(Autotune, WithoutCerarTheScaleIsNotSwept) {
  AutotuneOptions options;
  options.warmupSamples = 1;
  options.stepsPerSample = 2;
  Autotuner tuner(options, {8 * kMiB, 5.0, 1.0});
  const auto samples =
      train(tuner, 200, [](const TuningPoint& p, int) { return bowl(p); },
            [](const TuningPoint&) { return false; });
  ASSERT_TRUE(tuner.frozen());
  EXPECT_EQ(samples.size(), size_t(1 + 9 + 5 + 8));
  for (const auto& s : samples) EXPECT_EQ(s.point.componentsScale, 1.0);
  EXPECT_EQ(tuner.best(), (TuningPoint{16 * kMiB, 2.0, 1.0}));
}

// CERAR ran at other points (the large thresholds) but not at the best one: every scale would
// score the best point again, so c is not swept.
TEST(Autotune, WithoutCerarAtTheBestPointTheScaleIsNotSwept) {
  AutotuneOptions options;
  options.warmupSamples = 1;
  options.stepsPerSample = 2;
  Autotuner tuner(options, {64 * kMiB, 1.0, 1.0});
  const auto samples = train(tuner, 200, [](const TuningPoint& p, int) { return bowl(p); },
                             [](const TuningPoint& p) { return p.thresholdBytes >= 32 * kMiB; });
  ASSERT_TRUE(tuner.frozen());
  EXPECT_EQ(samples.size(), size_t(1 + 9 + 5 + 8));
  for (const auto& s : samples) EXPECT_EQ(s.point.componentsScale, 1.0);
  EXPECT_EQ(tuner.best(), (TuningPoint{16 * kMiB, 2.0, 1.0}));

  // The same walk with CERAR at 16 MiB too sweeps the scales there.
  Autotuner swept(options, {64 * kMiB, 1.0, 1.0});
  train(swept, 300, [](const TuningPoint& p, int) { return bowl(p); },
        [](const TuningPoint& p) { return p.thresholdBytes >= 16 * kMiB; });
  ASSERT_TRUE(swept.frozen());
  EXPECT_EQ(swept.best(), (TuningPoint{16 * kMiB, 2.0, 2.0}));
}

TEST(Autotune, EmptyGridsFreezeAtTheStart) {
  AutotuneOptions options;
  options.warmupSamples = 0;
  options.thresholds.clear();
  options.cycleTimesMs.clear();
  options.componentsScales.clear();
  const TuningPoint start{3 * kMiB, 4.0, 1.0};
  Autotuner tuner(options, start);
  EXPECT_TRUE(tuner.frozen());
  EXPECT_EQ(tuner.current(), start);
}

TEST(Autotune, BadOptionsAreRefused) {
  AutotuneOptions options;
  options.stepsPerSample = 0;
  EXPECT_THROW(Autotuner(options, {}), Error);
  options.stepsPerSample = 1;
  options.warmupSamples = -1;
  EXPECT_THROW(Autotuner(options, {}), Error);
}

TEST(Autotune, LogLines) {
  EXPECT_EQ(autotuneCsvHeader(),
            "sample,warmup,fusion_threshold_bytes,cycle_time_ms,components_scale,"
            "score_bytes_per_second");
  AutotuneSample s;
  s.index = 4;
  s.point = {2 * kMiB, 0.5, 0.25};
  s.score = 1.5e9;
  EXPECT_EQ(autotuneCsvLine(s), "4,0,2097152,0.5,0.25,1.5e+09");
  s.warmup = true;
  EXPECT_EQ(autotuneCsvLine(s), "4,1,2097152,0.5,0.25,1.5e+09");
  EXPECT_EQ(autotuneCsvBest({0, 20, 4}, 123.0), "best,0,0,20,4,123");
}

}  // namespace
}  // namespace cerar
