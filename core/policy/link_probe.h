// Measures the link figures of the cost model at start: a lock-step round's latency (alpha);
// a 2 MiB round as the executor streams it, free and through each candidate send window
// (windowBytes; beta from the fastest); the time per round of CERAR runs, of exact ring runs
// and of fp16 wire ring runs streamed with that window, from 1 KiB messages up to where
// CERAR's cost their bytes (LinkModel::rounds, ringRounds, wireRounds: each choice's own
// cost); and the codec's per-byte times (gamma, gammaWire).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/policy/selection.h"
#include "ops/transport/transport.h"

namespace cerar {

// Every rank must call it at the same point. Each rank sends about 16 MiB in all: tens of ms
// at 10 Gbit/s, about 1 s at 200 Mbit/s. Every rank returns the same figures: each the
// slowest rank's (the window rank 0's), so that all ranks select the same algorithm for a
// buffer and stream it alike. `ownRoundsSeconds`, if given, receives this rank's seconds spent
// on the rings' rounds (what each choice's own curve adds to the start-up). Without `wires`
// no fp16 wire curve (wireRounds stays empty).
LinkModel probeLink(Transport& transport, double* ownRoundsSeconds = nullptr, bool wires = true);

// The probe's free 2 MiB round against the fastest window's (docs/pacing.md, "Who chooses").
struct WindowTrial {
  size_t bytes = 0;
  double freeSeconds = 0;
  double windowSeconds = 0;
  uint64_t freeRetransmitted = 0;  // TCP segments this rank resent during the free trials
};
// Whether to stream through the window: it is no more than 5 % slower than none, and the free
// stream was slower than a CPU-bound one (100 MB/s) and lost packets (8 segments or more), the
// shallow queues a window cures. Elsewhere its lock step only adds waits.
bool windowWorthIt(const WindowTrial& trial);
// Whether the free stream ran faster than 100 MB/s (0.8 Gbit/s): bound by the CPU, not by a
// queue.
bool cpuBoundStream(const WindowTrial& trial);

// The message sizes the probe times, increasing: 1 KiB, 4 KiB, ... 1 MiB, and the executor's
// segment (`segmentBytes`) where it falls between them. A round's cost is flat up to one segment
// and climbs past it, so interpolating over a segment misprices the c whose messages are one
// segment long, often the fastest (N=4 at 2.5 Gbit/s, 32 KiB segments: runs of 32 KiB messages
// took 0.2 ms per round, interpolation between 16 and 64 KiB said 0.28 ms, and auto chose
// 64 KiB messages, 1.2x slower).
std::vector<size_t> probeMessageSizes(size_t segmentBytes);

// Each figure's largest value over the ranks, on every rank: the slowest host bounds every
// round of a ring, and all ranks must hold the same figures (selection agrees bit for bit).
// Collective; every rank passes as many values.
std::vector<double> slowestOverRanks(Transport& transport, std::vector<double> values);

// A layered job's local step (docs/hierarchical.md): a reduce-scatter and an all-gather among
// the host's ranks (`local`) of 16 KiB and of 4 MiB, the best of 3 each, fitted to
// LinkModel::localAlpha and localBeta, each the slowest rank's over the whole job (`job`).
// Every rank calls it at the same point.
void probeLocalStep(const std::shared_ptr<Transport>& local, Transport& job, LinkModel& link);

}  // namespace cerar
