// Measures the link figures of the cost model at start: per-round latency (alpha) and
// per-byte time (beta) of ring exchanges, and the codec's per-byte time (gamma).
#pragma once

#include "core/selection.h"
#include "ops/transport/transport.h"

namespace cerar {

// Every rank must call it at the same point. Takes a few milliseconds on a LAN; every rank
// returns rank 0's figures, so that all ranks select the same algorithm for a buffer.
LinkModel probeLink(Transport& transport);

}  // namespace cerar
