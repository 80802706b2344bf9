// The link model a job starts with: what of it the runtime's stats (and so the metrics) say.
#include <gtest/gtest.h>

#include <array>

#include "core/policy/link_setup.h"

namespace cerar {
namespace {

// The figures the metrics export: probed only where the probe ran and no test's figures
// replaced it; the host step's only in a layered job.
TEST(LinkSetup, RecordLinkSaysWhatWasProbed) {
  LinkModel link;
  link.alpha = 3e-5;
  link.beta = 2e-9;
  link.localAlpha = 4e-6;
  link.localBeta = 1e-10;
  link.cpuBound = true;
  link.windowBytes = 65536;
  RuntimeConfig config;
  RuntimeStats stats;
  recordLink(stats, link, config, true);
  EXPECT_TRUE(stats.linkCpuBound);
  EXPECT_EQ(stats.linkWindowBytes, 65536u);
  EXPECT_TRUE(stats.link.probed);
  EXPECT_EQ(stats.link.alpha, 3e-5);
  EXPECT_EQ(stats.link.beta, 2e-9);
  EXPECT_TRUE(stats.hostStep);
  EXPECT_TRUE(stats.hostLink.probed);
  EXPECT_EQ(stats.hostLink.alpha, 4e-6);
  EXPECT_EQ(stats.hostLink.beta, 1e-10);

  config.linkFigures = std::array<double, 3>{1e-5, 1e-9, 1e-10};
  recordLink(stats, link, config, false);
  EXPECT_FALSE(stats.link.probed);
  EXPECT_FALSE(stats.hostStep);
  EXPECT_EQ(stats.hostLink.alpha, 0);

  config.linkFigures.reset();
  config.measureLink = false;
  recordLink(stats, LinkModel{}, config, true);
  EXPECT_FALSE(stats.linkCpuBound);
  EXPECT_EQ(stats.linkWindowBytes, 0u);
  EXPECT_FALSE(stats.link.probed);
  EXPECT_FALSE(stats.hostLink.probed);
  EXPECT_EQ(stats.link.alpha, LinkModel{}.alpha);
  EXPECT_EQ(stats.hostLink.beta, LinkModel{}.localBeta);
}

}  // namespace
}  // namespace cerar
