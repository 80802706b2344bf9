// Measures the link figures of the cost model at start: per-round latency (alpha), the time
// per round of streamed ring rounds from 16 KiB to 4 MiB messages (LinkModel::rounds; beta
// from the longest), and the codec's per-byte time (gamma).
#pragma once

#include "core/selection.h"
#include "ops/transport/transport.h"

namespace cerar {

// Every rank must call it at the same point. Each rank sends 16 MiB in all: about 15 ms at
// 10 Gbit/s, 0.7 s at 200 Mbit/s. Every rank returns rank 0's figures, so that all ranks select the same algorithm for a buffer.
LinkModel probeLink(Transport& transport);

}  // namespace cerar
