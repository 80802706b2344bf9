#include "common/env.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "common/error.h"

extern char** environ;

namespace cerar {

EnvironmentLookup processEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::vector<std::string> processVariableNames() {
  std::vector<std::string> names;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string line = *entry;
    names.push_back(line.substr(0, line.find('=')));
  }
  return names;
}

std::optional<std::string> Env::text(const std::string& name) const {
  auto value = lookup_(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

long long Env::integer(const std::string& name, long long fallback, long long low,
                       long long high) const {
  auto value = text(name);
  if (!value) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(value->c_str(), &end, 10);
  if (errno != 0 || end == value->c_str() || *end != '\0' || parsed < low || parsed > high) {
    throw InvalidArgumentError(detail::concat("bad value for ", name, ": '", *value,
                                              "' (expected an integer in [", low, ", ", high,
                                              "])"));
  }
  return parsed;
}

long long Env::required(const std::string& name, long long low, long long high) const {
  if (!has(name)) throw InvalidArgumentError(name + " is not set");
  return integer(name, 0, low, high);
}

double Env::number(const std::string& name, double fallback, double low) const {
  auto value = text(name);
  if (!value) return fallback;
  errno = 0;
  char* end = nullptr;
  const double parsed = std::strtod(value->c_str(), &end);
  if (errno != 0 || end == value->c_str() || *end != '\0' || !std::isfinite(parsed) ||
      parsed < low) {
    throw InvalidArgumentError(detail::concat("bad value for ", name, ": '", *value,
                                              "' (expected a number >= ", low, ")"));
  }
  return parsed;
}

bool Env::flag(const std::string& name, bool fallback) const {
  auto value = text(name);
  if (!value) return fallback;
  if (*value == "1" || *value == "true") return true;
  if (*value == "0" || *value == "false") return false;
  throw InvalidArgumentError("bad value for " + name + ": '" + *value + "' (expected 0 or 1)");
}

}  // namespace cerar
