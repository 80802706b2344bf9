// A test's environment: variables in a map, looked up as the process's would be.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/env.h"
#include "core/config/config.h"

namespace cerar::testing {

using Variables = std::map<std::string, std::string>;

// Looks names up in `variables`, which must outlive the lookup.
inline EnvironmentLookup lookupIn(const Variables& variables) {
  return [&variables](const std::string& name) -> std::optional<std::string> {
    auto it = variables.find(name);
    if (it == variables.end()) return std::nullopt;
    return it->second;
  };
}

// The RuntimeConfig that `variables` would give as the process's environment.
inline RuntimeConfig configFrom(const Variables& variables) {
  return configFromEnvironment(lookupIn(variables));
}

}  // namespace cerar::testing
