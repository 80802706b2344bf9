// The settings table (core/config/settings.h) and the environment parser (common/env.h): the table
// drives reading, the job-wide list and docs/settings.md, so they cannot disagree.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/config/config.h"
#include "common/env.h"
#include "core/config/job_config.h"
#include "rendezvous/tcp_store.h"
#include "core/config/settings.h"
#include "common/error.h"
#include "variables.h"

namespace cerar {
namespace {

using testing::lookupIn;
using testing::Variables;

std::string errorOf(const Variables& variables) {
  try {
    configFromEnvironment(lookupIn(variables));
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

// --- the parser ------------------------------------------------------------------------------

TEST(Env, EmptyIsUnsetAndBadValuesSayWhatWasExpected) {
  const Variables variables{{"E", ""}, {"I", "12"}, {"N", "2.5"}, {"F", "true"}, {"X", "12x"}};
  const Env env(lookupIn(variables));
  EXPECT_FALSE(env.has("E"));
  EXPECT_EQ(env.integer("E", 7, 0, 10), 7);
  EXPECT_EQ(env.integer("I", 7, 0, 20), 12);
  EXPECT_DOUBLE_EQ(env.number("N", 0, 0), 2.5);
  EXPECT_TRUE(env.flag("F", false));
  EXPECT_THROW(env.required("E", 0, 1), InvalidArgumentError);
  try {
    env.integer("I", 0, 0, 10);
    FAIL() << "out of range";
  } catch (const InvalidArgumentError& e) {
    EXPECT_STREQ(e.what(), "bad value for I: '12' (expected an integer in [0, 10])");
  }
  EXPECT_THROW(env.integer("X", 0, 0, 100), InvalidArgumentError);
  EXPECT_THROW(env.number("X", 0, 0), InvalidArgumentError);
  EXPECT_THROW(env.number("N", 0, 3), InvalidArgumentError);
  EXPECT_THROW(env.flag("I", false), InvalidArgumentError);
}

TEST(Env, StoreLimitsUseTheSameParser) {
  ASSERT_EQ(setenv("CERAR_STORE_MAX_KEY_BYTES", "many", 1), 0);
  try {
    StoreLimits::fromEnvironment();
    ADD_FAILURE() << "a bad limit was taken";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("bad value for CERAR_STORE_MAX_KEY_BYTES: 'many'"),
              std::string::npos);
  }
  ASSERT_EQ(setenv("CERAR_STORE_MAX_KEY_BYTES", "77", 1), 0);
  EXPECT_EQ(StoreLimits::fromEnvironment().maxKeyBytes, 77u);
  unsetenv("CERAR_STORE_MAX_KEY_BYTES");
  EXPECT_EQ(StoreLimits::fromEnvironment().maxKeyBytes, StoreLimits{}.maxKeyBytes);
}

// --- the table -------------------------------------------------------------------------------

TEST(Settings, NamesAreUniqueAndJobWideRowsAreTheAgreedOnes) {
  std::set<std::string> variables, attributes;
  std::vector<std::string> job;
  for (const Setting& s : settings()) {
    EXPECT_TRUE(variables.insert(s.variable).second) << s.variable;
    EXPECT_TRUE(attributes.insert(s.attribute).second) << s.attribute;
    for (const char* alias : s.aliases) EXPECT_TRUE(variables.insert(alias).second) << alias;
    if (s.kind == SettingKind::kJob) job.push_back(s.variable);
    EXPECT_NE(std::string(s.why), "") << s.variable;
  }
  EXPECT_EQ(job, jobSettingNames());
  EXPECT_EQ(job.front(), "CERAR_ALGORITHM");  // the encoding's first field
}

TEST(Settings, UnsetVariablesLeaveTheDefaults) {
  const RuntimeConfig read = configFromEnvironment(lookupIn({}));
  const RuntimeConfig defaults;
  for (const Setting& s : settings()) {
    std::visit([&](auto member) { EXPECT_EQ(read.*member, defaults.*member) << s.variable; },
               s.field);
  }
}

// Every variable the table reads takes a good value and names itself with a bad one.
TEST(Settings, EveryVariableIsReadAndCheckedByItsType) {
  for (const Setting& s : settings()) {
    if (s.ownRule) continue;
    const std::string type = settingType(s);
    std::string good = type == "flag" ? "1" : type == "text" ? "x" : std::to_string(s.high);
    if (!s.choices.empty()) good = s.choices.back();
    if (type == "number") good = "2.5";
    if (s.variable == std::string("CERAR_LOG_LEVEL")) good = "info";
    const RuntimeConfig c = configFromEnvironment(lookupIn({{s.variable, good}}));
    std::visit(
        [&](auto member) {
          std::ostringstream shown;
          shown << std::boolalpha << (c.*member);
          const std::string expected = type == "flag" ? "true" : good;
          EXPECT_EQ(shown.str(), expected) << s.variable;
        },
        s.field);
    if (type == "text" && s.choices.empty()) continue;
    const std::string error = errorOf({{s.variable, "bad"}});
    EXPECT_NE(error.find(s.variable), std::string::npos) << s.variable << ": " << error;
  }
}

TEST(Settings, TheVariableWinsOverItsAliasesAndEveryOneIsChecked) {
  auto dynamic = [](const Variables& v) {
    return configFromEnvironment(lookupIn(v)).dynamicProcessSets;
  };
  EXPECT_TRUE(dynamic({{"HOROVOD_DYNAMIC_PROCESS_SETS", "1"}}));
  EXPECT_FALSE(
      dynamic({{"HOROVOD_DYNAMIC_PROCESS_SETS", "1"}, {"CERAR_DYNAMIC_PROCESS_SETS", "0"}}));
  EXPECT_NE(errorOf({{"HOROVOD_DYNAMIC_PROCESS_SETS", "maybe"},
                     {"CERAR_DYNAMIC_PROCESS_SETS", "1"}})
                .find("HOROVOD_DYNAMIC_PROCESS_SETS"),
            std::string::npos);
  const RuntimeConfig iface = configFromEnvironment(
      lookupIn({{"HOROVOD_GLOO_IFACE", "eth2"}, {"GLOO_SOCKET_IFNAME", "eth1,eth3"}}));
  EXPECT_EQ(iface.iface, "eth1");
  EXPECT_EQ(iface.ifaceVariable, "GLOO_SOCKET_IFNAME");
}

TEST(Settings, ChoicesAreListedAsTheMessagesSayThem) {
  EXPECT_EQ(choiceList(settingOf("CERAR_ALGORITHM")), "auto, ring or cerar");
  EXPECT_EQ(errorOf({{"CERAR_COMPRESSION", "fp8"}}),
            "cerar configuration from the environment: CERAR_COMPRESSION must be none, fp16, "
            "bf16, int8 or allow (or a comma-separated list of them), got 'fp8'");
  EXPECT_EQ(errorOf({{"CERAR_COMPRESSION", "fp16,,int8"}}),
            "cerar configuration from the environment: CERAR_COMPRESSION must be none, fp16, "
            "bf16, int8 or allow (or a comma-separated list of them), got 'fp16,,int8'");
  // A list names what a budget may choose: without one it means nothing.
  EXPECT_NE(errorOf({{"CERAR_COMPRESSION", "fp16,int8"}}).find("needs CERAR_MAX_ERROR"),
            std::string::npos);
  EXPECT_EQ(errorOf({{"CERAR_COMPRESSION", "fp16,int8"}, {"CERAR_MAX_ERROR", "1e-2"}}), "");
  EXPECT_THROW(settingOf("CERAR_NO_SUCH_THING"), InternalError);
}

// --- docs/settings.md ------------------------------------------------------------------------

std::string shownDefault(const Setting& s) {
  static const RuntimeConfig defaults;
  std::ostringstream out;
  std::visit(
      [&](auto member) {
        const auto& value = defaults.*member;
        if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>) {
          out << (value.empty() ? std::string("none") : "`" + value + "`");
        } else {
          out << "`" << value << "`";
        }
      },
      s.field);
  return out.str();
}

std::string shownValues(const Setting& s) {
  const std::string type = settingType(s);
  if (!s.choices.empty()) return choiceList(s);
  if (s.ownRule) return type;
  if (type == "integer") return detail::concat("integer in [", s.low, ", ", s.high, "]");
  if (type == "number") return detail::concat("number >= ", s.low);
  if (type == "flag") return "0 or 1";
  return type;
}

// The table of docs/settings.md, as the settings table writes it.
std::string settingsMarkdown() {
  std::ostringstream out;
  out << "| variable | attribute | kind | values | default | why |\n"
      << "|---|---|---|---|---|---|\n";
  for (const Setting& s : settings()) {
    out << "| `" << s.variable << "`";
    for (size_t i = 0; i < s.aliases.size(); ++i) {
      out << (i == 0 ? " (or " : ", ") << "`" << s.aliases[i] << "`";
    }
    out << (s.aliases.empty() ? "" : ")") << " | `" << s.attribute << "` | "
        << (s.kind == SettingKind::kJob ? "job" : "rank") << " | " << shownValues(s) << " | "
        << shownDefault(s) << " | " << s.why << " |\n";
  }
  return out.str();
}

std::string docTable() {
  const auto path = std::filesystem::path(__FILE__).parent_path() / "../../docs/settings.md";
  std::ifstream in(path);
  if (!in) return "cannot read " + path.string();
  std::stringstream whole;
  whole << in.rdbuf();
  const std::string text = whole.str();
  const std::string begin = "<!-- settings table -->\n", end = "<!-- end of settings table -->";
  const size_t from = text.find(begin), to = text.find(end);
  if (from == std::string::npos || to == std::string::npos) return "no markers in " + path.string();
  return text.substr(from + begin.size(), to - from - begin.size());
}

TEST(Settings, TheDocsTableIsTheSettingsTable) {
  EXPECT_EQ(docTable(), settingsMarkdown())
      << "docs/settings.md disagrees with core/config/settings.cc; its table between the markers "
         "should read:\n"
      << settingsMarkdown();
}

}  // namespace
}  // namespace cerar
