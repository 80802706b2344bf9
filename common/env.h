// Environment variables as typed settings: one parser, so every CERAR_* variable follows the
// same rules (an empty value is unset) and a bad value is reported the same way.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cerar {

// Looks up one environment variable; nullopt when unset.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;

// This process's environment (getenv).
EnvironmentLookup processEnvironment();

// The names of this process's environment variables.
std::vector<std::string> processVariableNames();

// Reads of one variable by type. A malformed value throws InvalidArgumentError naming the
// variable, its value and what was expected.
class Env {
 public:
  explicit Env(EnvironmentLookup lookup) : lookup_(std::move(lookup)) {}

  // The value; nullopt when unset or empty (VAR= counts as unset).
  std::optional<std::string> text(const std::string& name) const;
  bool has(const std::string& name) const { return text(name).has_value(); }
  // An integer in [low, high]; `fallback` when unset.
  long long integer(const std::string& name, long long fallback, long long low,
                    long long high) const;
  // An integer in [low, high] that must be set.
  long long required(const std::string& name, long long low, long long high) const;
  // A finite number >= low; `fallback` when unset.
  double number(const std::string& name, double fallback, double low) const;
  // 1 or true, 0 or false; `fallback` when unset.
  bool flag(const std::string& name, bool fallback) const;

 private:
  EnvironmentLookup lookup_;
};

}  // namespace cerar
