// The settings table: one row per RuntimeConfig setting that has a variable or a Python
// attribute. It is the one list behind reading the environment (core/config/config.cc), the job-wide
// agreement (core/config/job_config.cc), RuntimeConfig's Python attributes (bindings/settings.cc),
// cerarrun's knob flags (frameworks/cerar/runner/cli.py) and the table of docs/settings.md (checked
// by tests/cpp/settings_test.cc).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/config/runtime_config.h"

namespace cerar {

class Env;

// The RuntimeConfig field a row sets; its type decides how the variable is parsed.
using SettingField =
    std::variant<int RuntimeConfig::*, size_t RuntimeConfig::*, double RuntimeConfig::*,
                 bool RuntimeConfig::*, std::string RuntimeConfig::*>;

// Job-wide: rank 0's value is the job's (core/config/job_config.h), since ranks with different values
// would post different transfers or give up at different times. Per rank: needed before
// ranks can talk, or local by nature.
enum class SettingKind { kJob, kRank };

// cerarrun's flag for a setting: --name, given in `scale` units of the setting's (MiB of a
// byte count: 1 << 20; the flag then takes a number and the variable gets the whole product).
struct LauncherFlag {
  const char* name = "";  // "" when there is none
  const char* help = "";
  const char* metavar = "";
  double scale = 1;
};

struct Setting {
  SettingField field;
  const char* attribute;  // RuntimeConfig's Python attribute (init() overrides)
  const char* variable;
  // Other names of the variable (other libraries', so that their job scripts keep working).
  // Every one that is set is checked, in its own units where they differ (aliasValue); the
  // variable wins over them, with a warning where they disagree, an earlier alias over a later
  // one.
  std::vector<const char*> aliases{};
  SettingKind kind;
  const char* why;  // one line for docs/settings.md
  // Integers: the range [low, high]; numbers: at least low. Text: its values, if fixed
  // (validateConfig checks them).
  long long low = 0, high = 0;
  std::vector<const char*> choices{};
  // Text: a comma-separated list of the choices is valid too ("fp16,int8").
  bool list = false;
  // Read by core/config/config.cc's own rules (the launchers' identity, the interface list) rather
  // than by readSettings.
  bool ownRule = false;
  LauncherFlag flag{};
};

// Every row: the job-wide ones first, in the order of their encoding (core/config/job_config.cc).
const std::vector<Setting>& settings();

// The row of `variable`; throws InternalError when there is none.
const Setting& settingOf(const std::string& variable);

// "integer", "number", "flag" or "text": how the variable is written.
const char* settingType(const Setting& setting);

// The choices as a message lists them: "auto, ring or cerar".
std::string choiceList(const Setting& setting);

// The items of a list setting's value ("fp16,int8": fp16 and int8); an empty item stays, so that
// validation refuses it.
std::vector<std::string> splitList(const std::string& value);

// An alias's value in its variable's units, where they differ: HOROVOD_LOG_LEVEL's trace is
// debug and its fatal error; HOROVOD_STALL_CHECK_DISABLE=1 is a check time of 0. nullopt when
// the value has no effect (HOROVOD_STALL_CHECK_DISABLE=0). Throws InvalidArgumentError when
// malformed.
std::optional<std::string> aliasValue(const std::string& alias, const std::string& value);

// The warning of a variable and its alias both set with different values (both set in `env`).
std::string bothSetWarning(const Env& env, const char* variable, const char* alias);

// Sets every row without its own rule from its variable or aliases where set; the value in
// `config` stays where none is. Returns a warning for each variable set along with an alias
// of another value (the variable wins). Throws InvalidArgumentError naming a malformed
// variable.
std::vector<std::string> readSettings(const Env& env, RuntimeConfig& config);

}  // namespace cerar
