// The job-wide settings (docs/settings.md): rank 0's values are the job's. Every
// rank adopts them at init, so a rank started with a different environment or different
// init() overrides cannot run different fused operations, algorithms or limits from the
// others; it logs one warning per setting it had differently.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/config/runtime_config.h"

namespace cerar {

// Rank 0's job-wide settings, serialised (a version byte, then the fields in a fixed order).
std::vector<uint8_t> encodeJobSettings(const RuntimeConfig& config);

// `mine` with the job-wide settings of `encoded` (rank 0's); every other field is kept.
// `differences` gets one line per setting whose value differed: its variable name, this
// rank's value and the job's. Throws Error on a malformed or foreign encoding.
RuntimeConfig adoptJobSettings(const RuntimeConfig& mine, const std::vector<uint8_t>& encoded,
                               std::vector<std::string>& differences);

// The names of the job-wide settings (CERAR_* variables), in encoding order.
std::vector<std::string> jobSettingNames();

// Sends rank 0's encoding to every rank: rank 0 passes its bytes and gets them back, others
// pass nothing and get rank 0's.
using SettingsExchange = std::function<std::vector<uint8_t>(const std::vector<uint8_t>& mine)>;

// The whole step: exchange, adopt, log a warning per difference on this rank.
RuntimeConfig agreeJobConfig(const RuntimeConfig& mine, const SettingsExchange& exchange);

}  // namespace cerar
