// Reading RuntimeConfig from the environment: the launchers' variables, knobs, bad values.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "core/config/config.h"
#include "variables.h"

namespace cerar {
namespace {

using Env = std::map<std::string, std::string>;

std::string errorOf(const Env& env) {
  try {
    testing::configFrom(env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, NoLauncherIsOneProcess) {
  RuntimeConfig c = testing::configFrom({});
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.size, 1);
  EXPECT_EQ(c.fusionThresholdBytes, 64u << 20);
  EXPECT_EQ(c.algorithm, "auto");
}

TEST(Config, LauncherVariablesAndKnobs) {
  RuntimeConfig c = testing::configFrom({{"CERAR_RANK", "2"}, {"CERAR_SIZE", "4"}, {"CERAR_LOCAL_RANK", "0"},
                             {"CERAR_LOCAL_SIZE", "2"}, {"CERAR_RENDEZVOUS_ADDR", "10.0.0.1"},
                             {"CERAR_RENDEZVOUS_PORT", "4242"}, {"CERAR_SECRET", "s"},
                             {"CERAR_FUSION_THRESHOLD", "0"}, {"CERAR_CYCLE_TIME", "2.5"},
                             {"CERAR_CACHE_CAPACITY", "16"}, {"CERAR_ALGORITHM", "cerar"},
                             {"CERAR_COMPONENTS", "8"}, {"CERAR_EPS", "0.001"},
                             {"CERAR_STALL_CHECK_TIME_SECONDS", "5"},
                             {"CERAR_LOG_LEVEL", "DEBUG"}, {"CERAR_SHARE_CORRECTION", "1"},
                             {"CERAR_DEBUG_ERROR", "true"}});
  EXPECT_TRUE(c.shareCorrection);
  EXPECT_TRUE(c.debugError);
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.size, 4);
  EXPECT_EQ(c.localSize, 2);
  EXPECT_EQ(c.rendezvousAddr, "10.0.0.1");
  EXPECT_EQ(c.rendezvousPort, 4242);
  EXPECT_FALSE(c.hostStore);  // cerarrun hosts the store
  EXPECT_EQ(c.fusionThresholdBytes, 0u);
  EXPECT_DOUBLE_EQ(c.cycleTimeMs, 2.5);
  EXPECT_EQ(c.cacheCapacity, 16u);
  EXPECT_EQ(c.components, 8);
  EXPECT_DOUBLE_EQ(c.eps, 0.001);
  EXPECT_DOUBLE_EQ(c.stallCheckSeconds, 5);
}

TEST(Config, TorchrunMpiAndSlurm) {
  RuntimeConfig t = testing::configFrom({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"},
                             {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node0"},
                             {"MASTER_PORT", "29500"}});
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.size, 8);
  EXPECT_EQ(t.localRank, 3);
  EXPECT_EQ(t.rendezvousAddr, "node0");
  EXPECT_EQ(t.rendezvousPort, 29501);  // MASTER_PORT + 1
  EXPECT_TRUE(t.hostStore);

  RuntimeConfig m = testing::configFrom({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.rendezvousAddr, "127.0.0.1");  // one node
  EXPECT_TRUE(m.hostStore);

  RuntimeConfig s = testing::configFrom({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                             {"SLURM_NNODES", "2"}, {"SLURM_JOB_ID", "1234"},
                             {"CERAR_RENDEZVOUS_ADDR", "head"}});
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.localRank, 1);
  EXPECT_EQ(s.localSize, 4);
  EXPECT_EQ(s.rendezvousAddr, "head");
  EXPECT_EQ(s.rendezvousPort, 21234);
  EXPECT_NE(errorOf({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_NNODES", "2"}})
                .find("CERAR_RENDEZVOUS_ADDR"),
            std::string::npos);
}

TEST(Config, BadValuesNameTheVariable) {
  EXPECT_NE(errorOf({{"CERAR_FUSION_THRESHOLD", "lots"}}).find("CERAR_FUSION_THRESHOLD: 'lots'"),
            std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_CYCLE_TIME", "-1"}}).find("CERAR_CYCLE_TIME"), std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_ALGORITHM", "tree"}}).find("tree"), std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_LOG_LEVEL", "loud"}}).find("loud"), std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_RANK", "4"}, {"CERAR_SIZE", "4"}}).find("CERAR_RANK: '4'"),
            std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_RANK", "0"}, {"CERAR_SIZE", "4"}, {"CERAR_COMPONENTS", "6"}})
                .find("CERAR_COMPONENTS=6"),
            std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_RANK", "0"}}).find("CERAR_SIZE is not set"), std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_AUTOTUNE_STEPS_PER_SAMPLE", "0"}})
                .find("CERAR_AUTOTUNE_STEPS_PER_SAMPLE"),
            std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_AUTOTUNE_WARMUP_SAMPLES", "-2"}})
                .find("CERAR_AUTOTUNE_WARMUP_SAMPLES"),
            std::string::npos);
}

TEST(Config, AutotuneKnobs) {
  const RuntimeConfig off = testing::configFrom({});
  EXPECT_FALSE(off.autotune);
  EXPECT_EQ(off.autotuneWarmupSamples, 3);
  EXPECT_EQ(off.autotuneStepsPerSample, 10);
  const RuntimeConfig on = testing::configFrom({{"CERAR_AUTOTUNE", "1"}, {"CERAR_AUTOTUNE_LOG", "/tmp/t.csv"},
                                    {"CERAR_AUTOTUNE_WARMUP_SAMPLES", "0"},
                                    {"CERAR_AUTOTUNE_STEPS_PER_SAMPLE", "4"}});
  EXPECT_TRUE(on.autotune);
  EXPECT_EQ(on.autotuneLog, "/tmp/t.csv");
  EXPECT_EQ(on.autotuneWarmupSamples, 0);
  EXPECT_EQ(on.autotuneStepsPerSample, 4);
  EXPECT_EQ(testing::configFrom({{"CERAR_COMPONENTS_SCALE", "0.5"}}).componentsScale, 0.5);
  EXPECT_NE(errorOf({{"CERAR_COMPONENTS_SCALE", "0"}}).find("CERAR_COMPONENTS_SCALE"),
            std::string::npos);
}

}  // namespace
}  // namespace cerar
