// The environment's names that cerar knows, so that none is ignored without a word: the
// settings table's, cerar's others, and Horovod's (a job script written for Horovod keeps its
// exports). RuntimeConfig::fromEnvironment logs the warnings on rank 0.
#pragma once

#include <string>
#include <vector>

namespace cerar {

class Logger;

// A Horovod runtime variable without a cerar equivalent, and why it has none.
struct IgnoredVariable {
  const char* name;
  const char* why;
};

// Horovod's names (core/config/horovod_names.cc): runtime variables without a cerar equivalent, and
// those that never warn (build-time, set by its launcher). A name ending in '*' is a prefix.
const std::vector<IgnoredVariable>& horovodIgnoredVariables();
const std::vector<const char*>& horovodQuietVariables();

// cerar's variables read outside the settings table (the store's limits, the launchers',
// the build's, benchmarks' and tests').
const std::vector<const char*>& otherCerarVariables();

// The known variable closest to `name` (fewest single-character edits).
std::string closestKnownVariable(const std::string& name);

// A warning per CERAR_* or HOROVOD_* name in `names` that has no effect: a Horovod variable
// without an equivalent (saying why) or an unknown name (with the closest known one).
std::vector<std::string> environmentWarnings(const std::vector<std::string>& names);

// Logs `message` as a warning unless this process has already logged it (init may run again).
void warnOnce(const Logger& logger, const std::string& message);

}  // namespace cerar
