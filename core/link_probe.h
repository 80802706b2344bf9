// Measures the link figures of the cost model at start: a lock-step round's latency (alpha);
// a 2 MiB round as the executor streams it, free and through each candidate send window
// (windowBytes; beta from the fastest); the time per round of CERAR runs streamed with that
// window, from 1 KiB messages up to where they cost their bytes (LinkModel::rounds); and the
// codec's per-byte time (gamma).
#pragma once

#include "core/log.h"
#include "core/runtime_config.h"
#include "core/selection.h"
#include "ops/executor.h"
#include "ops/transport/transport.h"

namespace cerar {

// Every rank must call it at the same point. Each rank sends about 16 MiB in all: tens of ms
// at 10 Gbit/s, about 1 s at 200 Mbit/s. Every rank returns rank 0's figures (the window too), so
// that all ranks select the same algorithm for a buffer and stream it alike.
LinkModel probeLink(Transport& transport);


// The coordinator's link model and the executor's pacing that goes with it.
struct LinkSetup {
  LinkModel link;
  Pacing pacing;
};
// Probed (RuntimeConfig::measureLink) or LinkModel's defaults, under a test's figures where
// given; rounds are charged by the segments of the pacing the executor streams with. Logged
// at info. Every rank calls it at start, as probeLink.
LinkSetup setUpLink(Transport& transport, const RuntimeConfig& config, const Logger& logger);

}  // namespace cerar
