// The coordinator's parts beside its cycle: the published counters and the fusion parameters.
#include <gtest/gtest.h>

#include "core/policy/coordinator_tuning.h"
#include "core/control/stats_publisher.h"

namespace cerar {
namespace {

TEST(CoordinatorParts, LateCountsShowAtOnceAndSurviveTheNextPublish) {
  StatsPublisher stats;
  stats.working().cycles = 3;
  stats.publish();
  stats.countLate([](RuntimeStats& s) { ++s.fusedBuffers; });
  EXPECT_EQ(stats.published().fusedBuffers, 1u);  // before the coordinator publishes again
  EXPECT_EQ(stats.published().cycles, 3u);
  ++stats.working().cycles;
  stats.publish();
  EXPECT_EQ(stats.published().fusedBuffers, 1u);
  EXPECT_EQ(stats.published().cycles, 4u);
  countControl(stats.working(), 10, true);
  EXPECT_EQ(stats.working().controlMessagesSent, 1u);
  EXPECT_GT(stats.working().controlBytesSent, 10u);  // the frame counts too
}

TEST(CoordinatorParts, EveryRankReportsTheParametersOfTheLastResponse) {
  RuntimeConfig config;
  config.autotune = true;
  config.fusionThresholdBytes = 1 << 20;
  Timeline timeline(1);
  Logger logger(1, LogLevel::kWarning, [](const std::string&) {});
  FusionTuning tuning(config, 4, /*decides=*/false, timeline, logger);
  RuntimeStats stats;
  tuning.report(stats);
  EXPECT_EQ(stats.fusionThresholdBytes, 1u << 20);
  EXPECT_TRUE(stats.autotuning);
  TuningState frozen;
  frozen.point.cycleTimeMs = 5;
  frozen.frozen = true;
  tuning.apply(frozen);
  tuning.report(stats);
  EXPECT_EQ(tuning.applied().cycleTimeMs, 5);
  EXPECT_TRUE(stats.autotuneFrozen);
  EXPECT_FALSE(stats.autotuning);
}

TEST(CoordinatorParts, TheCompressionSettingNamesWiresOnlyUnderABudget) {
  RuntimeConfig config;
  config.compression = "fp16";
  EXPECT_EQ(selectionPolicyOf(config).wire, Wire::kFloat16);
  config.maxError = 1e-3;
  const SelectionPolicy budget = selectionPolicyOf(config);
  EXPECT_EQ(budget.wire, Wire::kNone);
  EXPECT_TRUE(budget.allowFp16);
  EXPECT_FALSE(budget.allowBf16);
  EXPECT_TRUE(autotuneOptionsOf(config, 2).componentsScales.empty());  // no c on two ranks
  EXPECT_FALSE(autotuneOptionsOf(config, 4).componentsScales.empty());
}

}  // namespace
}  // namespace cerar
