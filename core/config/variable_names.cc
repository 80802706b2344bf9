#include "core/config/variable_names.h"

#include <algorithm>
#include <mutex>
#include <set>

#include "core/log.h"
#include "core/config/settings.h"

namespace cerar {

const std::vector<const char*>& otherCerarVariables() {
  static const std::vector<const char*> names{
      // The store's limits (rendezvous/tcp_store.cc) and the drift check's.
      "CERAR_STORE_MAX_CONNECTIONS", "CERAR_STORE_HELLO_TIMEOUT_SECONDS",
      "CERAR_STORE_CONNECTION_QUOTA_BYTES", "CERAR_STORE_MAX_KEY_BYTES",
      "CERAR_STORE_MAX_VALUE_BYTES", "CERAR_DRIFT_CHECK_EVERY", "CERAR_DRIFT_TOLERANCE",
      // What cerarrun's elastic driver tells its workers (frameworks/cerar/elastic/protocol.py).
      "CERAR_ELASTIC_ID", "CERAR_ELASTIC_GENERATION", "CERAR_ELASTIC_TIMEOUT",
      // The build's options, the launchers' and the test and benchmark scripts'.
      "CERAR_WITH_CUDA", "CERAR_BUILD_PYTHON", "CERAR_BUILD_TESTS", "CERAR_BUILD_DIR",
      "CERAR_SANITIZE", "CERAR_FUZZ", "CERAR_PYTHON", "CERAR_NO_RAY", "CERAR_FUZZ_SECONDS",
      "CERAR_BENCH_NET", "CERAR_BENCH_ONLY", "CERAR_PEAK_GBPS", "CERAR_TEST_BACKEND",
      "CERAR_TEST_STORE", "CERAR_NETEM_STATE_DIR", "CERAR_NETEM_TEST_FAIL_AFTER",
      "CERAR_NETEM_TEST_STEP_DELAY", "CERAR_NETNS_IFACE", "CERAR_MPI_NETNS_PREFIX",
      "CERAR_ALLOW_MISSING_EXTENSION", "CERAR_WARNING_FILTERS", "CERAR_ENV_CACHE",
      "CERAR_REQUIRE_TORCH2", "CERAR_REQUIRE_TF",
  };
  return names;
}

namespace {

// Every known name; a name ending in '*' stands for its prefix.
std::vector<std::string> knownVariables() {
  std::vector<std::string> names;
  for (const Setting& s : settings()) {
    names.push_back(s.variable);
    names.insert(names.end(), s.aliases.begin(), s.aliases.end());
  }
  for (const IgnoredVariable& v : horovodIgnoredVariables()) names.push_back(v.name);
  for (const auto* list : {&horovodQuietVariables(), &otherCerarVariables()}) {
    names.insert(names.end(), list->begin(), list->end());
  }
  return names;
}

bool matches(const std::string& pattern, const std::string& name) {
  if (!pattern.empty() && pattern.back() == '*') {
    return name.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0;
  }
  return pattern == name;
}

bool isKnown(const std::string& name) {
  static const std::vector<std::string> known = knownVariables();
  return std::any_of(known.begin(), known.end(),
                     [&](const std::string& pattern) { return matches(pattern, name); });
}

// Levenshtein distance, one row at a time.
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

bool isOurs(const std::string& name) {
  return name.rfind("CERAR_", 0) == 0 || name.rfind("HOROVOD_", 0) == 0;
}

}  // namespace

std::string closestKnownVariable(const std::string& name) {
  std::string best;
  size_t bestDistance = size_t(-1);
  for (const std::string& known : knownVariables()) {
    if (known.back() == '*') continue;  // a prefix is no name to suggest
    const size_t distance = editDistance(name, known);
    if (distance < bestDistance) best = known, bestDistance = distance;
  }
  return best;
}

std::vector<std::string> environmentWarnings(const std::vector<std::string>& names) {
  std::vector<std::string> warnings;
  for (const std::string& name : names) {
    if (!isOurs(name)) continue;
    const auto& ignored = horovodIgnoredVariables();
    const auto it = std::find_if(ignored.begin(), ignored.end(),
                                 [&](const IgnoredVariable& v) { return name == v.name; });
    if (it != ignored.end()) {
      warnings.push_back(name + " has no effect here: " + it->why);
    } else if (!isKnown(name)) {
      warnings.push_back(name + " is not a variable cerar knows (has no effect); did you mean " +
                         closestKnownVariable(name) + "?");
    }
  }
  return warnings;
}

void warnOnce(const Logger& logger, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> logged;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!logged.insert(message).second) return;
  }
  logger.log(LogLevel::kWarning, message);
}

}  // namespace cerar
