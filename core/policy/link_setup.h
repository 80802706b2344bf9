// The link model a job starts with, and the pacing that goes with it: the link probe's
// (core/policy/link_probe.h), LinkModel's defaults, or a test's figures; logged, and copied
// into the runtime's stats for the metrics.
#pragma once

#include "core/config/runtime_config.h"
#include "core/log.h"
#include "core/policy/selection.h"
#include "core/runtime_stats.h"
#include "ops/run_types.h"
#include "ops/transport/transport.h"

namespace cerar {

// The coordinator's link model and the executor's pacing that goes with it.
struct LinkSetup {
  LinkModel link;
  Pacing pacing;
};
// Probed (RuntimeConfig::measureLink) or LinkModel's defaults; a test's figures where given
// replace them (measured curves included). Rounds are charged by the segments of the pacing
// the executor streams with. Logged at info, with the probe's time. The fp16 wire's curve is
// probed only with an error budget (RuntimeConfig::maxError, job-wide). Every rank calls it
// at start, as probeLink.
LinkSetup setUpLink(Transport& transport, const RuntimeConfig& config, const Logger& logger);

// Copies `link`'s figures into `stats` (RuntimeStats::link, hostLink), for the metrics: the
// job's as probed unless the probe is off or a test's figures replace them, with the probe's
// verdict and window; the host step's only with `hostStep` (a layered job), probed where the
// probe is on.
void recordLink(RuntimeStats& stats, const LinkModel& link, const RuntimeConfig& config,
                bool hostStep);

}  // namespace cerar
