// Horovod's variables (core/config/settings.cc's aliases, core/config/variable_names.h): each alias read in
// its own units, the cerar variable winning with a warning, and no name without effect passed
// over silently.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/config/config.h"
#include "core/config/settings.h"
#include "core/config/variable_names.h"
#include "common/env.h"
#include "common/error.h"
#include "variables.h"

namespace cerar {
namespace {

using testing::lookupIn;
using testing::Variables;

RuntimeConfig read(const Variables& variables, std::vector<std::string>* warnings = nullptr) {
  RuntimeConfig config;
  const std::vector<std::string> conflicts = readSettings(Env(lookupIn(variables)), config);
  if (warnings != nullptr) *warnings = conflicts;
  return config;
}

TEST(HorovodEnv, EachAliasIsReadInItsUnits) {
  const RuntimeConfig c = read({{"HOROVOD_FUSION_THRESHOLD", "0"},
                                {"HOROVOD_CYCLE_TIME", "7"},
                                {"HOROVOD_CACHE_CAPACITY", "64"},
                                {"HOROVOD_TIMELINE", "/tmp/tl.json"},
                                {"HOROVOD_AUTOTUNE", "1"},
                                {"HOROVOD_AUTOTUNE_LOG", "tune.csv"},
                                {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "5"},
                                {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "20"},
                                {"HOROVOD_STALL_CHECK_TIME_SECONDS", "30"},
                                {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "120"},
                                {"HOROVOD_LOG_LEVEL", "info"},
                                {"HOROVOD_GLOO_TIMEOUT_SECONDS", "45"}});
  EXPECT_EQ(c.fusionThresholdBytes, 0u);
  EXPECT_DOUBLE_EQ(c.cycleTimeMs, 7);
  EXPECT_EQ(c.cacheCapacity, 64);
  EXPECT_EQ(c.timeline, "/tmp/tl.json");  // no {rank}: rank 0 alone writes, as Horovod's
  EXPECT_TRUE(c.autotune);
  EXPECT_EQ(c.autotuneLog, "tune.csv");
  EXPECT_EQ(c.autotuneWarmupSamples, 5);
  EXPECT_EQ(c.autotuneStepsPerSample, 20);
  EXPECT_DOUBLE_EQ(c.stallCheckSeconds, 30);
  EXPECT_DOUBLE_EQ(c.stallShutdownSeconds, 120);
  EXPECT_EQ(c.logLevel, "info");
  EXPECT_DOUBLE_EQ(c.timeoutSeconds, 45);
}

TEST(HorovodEnv, LogLevelsAndTheStallSwitchAreConverted) {
  EXPECT_EQ(read({{"HOROVOD_LOG_LEVEL", "trace"}}).logLevel, "debug");
  EXPECT_EQ(read({{"HOROVOD_LOG_LEVEL", "FATAL"}}).logLevel, "error");
  EXPECT_EQ(read({{"HOROVOD_LOG_LEVEL", "Warning"}}).logLevel, "warning");
  EXPECT_THROW(read({{"HOROVOD_LOG_LEVEL", "loud"}}), InvalidArgumentError);
  const double checkDefault = RuntimeConfig{}.stallCheckSeconds;
  EXPECT_DOUBLE_EQ(read({{"HOROVOD_STALL_CHECK_DISABLE", "1"}}).stallCheckSeconds, 0);
  EXPECT_DOUBLE_EQ(read({{"HOROVOD_STALL_CHECK_DISABLE", "0"}}).stallCheckSeconds, checkDefault);
  // Disabled wins over a check time, as in Horovod.
  EXPECT_DOUBLE_EQ(read({{"HOROVOD_STALL_CHECK_DISABLE", "1"},
                         {"HOROVOD_STALL_CHECK_TIME_SECONDS", "30"}})
                       .stallCheckSeconds,
                   0);
  try {
    read({{"HOROVOD_STALL_CHECK_DISABLE", "yes"}});
    FAIL() << "a malformed switch";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("HOROVOD_STALL_CHECK_DISABLE"), std::string::npos);
  }
}

TEST(HorovodEnv, TheCerarVariableWinsWithAWarningNamingBoth) {
  std::vector<std::string> warnings;
  const RuntimeConfig c =
      read({{"HOROVOD_FUSION_THRESHOLD", "0"}, {"CERAR_FUSION_THRESHOLD", "4096"}}, &warnings);
  EXPECT_EQ(c.fusionThresholdBytes, 4096u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "CERAR_FUSION_THRESHOLD=4096 and HOROVOD_FUSION_THRESHOLD=0 are both set: "
            "CERAR_FUSION_THRESHOLD wins");
  // The same value written differently is no disagreement.
  read({{"HOROVOD_CYCLE_TIME", "7"}, {"CERAR_CYCLE_TIME", "7.0"}}, &warnings);
  EXPECT_TRUE(warnings.empty());
  read({{"HOROVOD_LOG_LEVEL", "trace"}, {"CERAR_LOG_LEVEL", "debug"}}, &warnings);
  EXPECT_TRUE(warnings.empty());
  // The interface: CERAR_IFACE wins over Horovod's name too.
  const RuntimeConfig iface =
      configFromEnvironment(lookupIn({{"HOROVOD_GLOO_IFACE", "eth2"}, {"CERAR_IFACE", "eth1"}}));
  EXPECT_EQ(iface.iface, "eth1");
  EXPECT_EQ(bothSetWarning(Env(lookupIn({{"HOROVOD_GLOO_IFACE", "eth2"}, {"CERAR_IFACE", "eth1"}})),
                           "CERAR_IFACE", "HOROVOD_GLOO_IFACE"),
            "CERAR_IFACE=eth1 and HOROVOD_GLOO_IFACE=eth2 are both set: CERAR_IFACE wins");
  // configFromEnvironment reads the same way (and logs the warning).
  EXPECT_EQ(configFromEnvironment(lookupIn({{"HOROVOD_CYCLE_TIME", "3"},
                                            {"CERAR_CYCLE_TIME", "5"}}))
                .cycleTimeMs,
            5);
}

TEST(HorovodEnv, NoEffectAndMisspeltNamesAreWarnedOf) {
  const std::vector<std::string> warnings = environmentWarnings(
      {"HOROVOD_HIERARCHICAL_ALLGATHER", "HOROVOD_NUM_NCCL_STREAMS", "HOROVOD_FUSION_THRESHOLD",
       "HOROVOD_FUSION_TRESHOLD", "CERAR_CYCLE_TIMES", "PATH"});
  ASSERT_EQ(warnings.size(), 4u);
  EXPECT_EQ(warnings[0],
            "HOROVOD_HIERARCHICAL_ALLGATHER has no effect here: hierarchical all-gather is not "
            "built");
  EXPECT_NE(warnings[1].find("HOROVOD_NUM_NCCL_STREAMS has no effect here"),
            std::string::npos);
  EXPECT_EQ(warnings[2],
            "HOROVOD_FUSION_TRESHOLD is not a variable cerar knows (has no effect); did you mean "
            "HOROVOD_FUSION_THRESHOLD?");
  EXPECT_NE(warnings[3].find("did you mean CERAR_CYCLE_TIME?"), std::string::npos);
  EXPECT_EQ(closestKnownVariable("CERAR_STORE_MAX_CONECTIONS"), "CERAR_STORE_MAX_CONNECTIONS");
}

TEST(HorovodEnv, BuildAndLauncherNamesAndCerarsOwnNeverWarn) {
  std::vector<std::string> names{"HOROVOD_WITH_PYTORCH", "HOROVOD_WITHOUT_MPI",
                                 "HOROVOD_GPU_OPERATIONS", "HOROVOD_HOSTNAME",
                                 "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS", "HOROVOD_RANK",
                                 "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_GLOO_IFACE"};
  for (const Setting& s : settings()) {
    names.push_back(s.variable);
    names.insert(names.end(), s.aliases.begin(), s.aliases.end());
  }
  names.insert(names.end(), otherCerarVariables().begin(), otherCerarVariables().end());
  EXPECT_EQ(environmentWarnings(names), std::vector<std::string>{});
}

// Every CERAR_ name the repository's code, scripts and docs use is known, so that no test, CI
// job or documented command gets a warning of a misspelt variable. Names that are no variables
// (macros, CMake's own variables, a Python constant, tests' made-up names, this file's typos)
// are skipped.
TEST(HorovodEnv, EveryCerarNameOfTheRepositoryIsKnown) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(__FILE__).parent_path() / "../..";
  const std::set<std::string> notVariables{"CERAR_ENV",     "CERAR_NO_SUCH_THING",
                                           "CERAR_NO_GLOO", "CERAR_NO_NCCL",
                                           "CERAR_HAVE_CUDA", "CERAR_ERROR_CLASS",
                                           "CERAR_ALLREDUCE"};  // a timeline activity
  const std::set<std::string> extensions{".py", ".sh", ".cc", ".h", ".cu", ".md", ".toml", ""};
  const std::regex name(R"(\bCERAR_[A-Z0-9_]*[A-Z0-9]\b(?![(_*]))");
  std::set<std::string> unknown;
  for (const char* dir : {"core", "ops", "bindings", "frameworks", "tests", "scripts", "bench",
                          "examples", "docs", "tools", ".ci"}) {
    if (!fs::exists(root / dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      if (!entry.is_regular_file() || !extensions.count(entry.path().extension().string()) ||
          fs::equivalent(entry.path(), __FILE__)) {
        continue;
      }
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string content = text.str();
      for (std::sregex_iterator it(content.begin(), content.end(), name), end; it != end; ++it) {
        const std::string found = it->str();
        if (!notVariables.count(found) && !environmentWarnings({found}).empty()) {
          unknown.insert(found + " (" + entry.path().filename().string() + ")");
        }
      }
    }
  }
  EXPECT_EQ(unknown, std::set<std::string>{});
}

}  // namespace
}  // namespace cerar
