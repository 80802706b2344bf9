// Measures the link figures of the cost model at start: per-round latency (alpha), the time
// per round of streamed ring rounds from 16 KiB to 1 MiB messages, then of a 2 MiB round as
// the executor streams it, free and through each candidate send window (LinkModel::rounds,
// windowBytes; beta from the fastest long round), and the codec's per-byte time (gamma).
#pragma once

#include "core/selection.h"
#include "ops/transport/transport.h"

namespace cerar {

// Every rank must call it at the same point. Each rank sends about 21 MiB in all: 20 ms at
// 10 Gbit/s, 0.9 s at 200 Mbit/s. Every rank returns rank 0's figures (the window too), so
// that all ranks select the same algorithm for a buffer and stream it alike.
LinkModel probeLink(Transport& transport);

}  // namespace cerar
