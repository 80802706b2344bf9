// The runtime's counters (Runtime::stats()).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace cerar {

// Upper bounds in seconds of the negotiation wait's histogram buckets (RuntimeStats), from a
// cycle's millisecond to a stall's seconds; a last bucket holds the rest.
inline constexpr std::array<double, 14> kWaitBounds = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

// A histogram of durations in kWaitBounds' buckets (counts per bucket, not cumulative).
struct WaitHistogram {
  std::array<uint64_t, kWaitBounds.size() + 1> buckets{};
  uint64_t count = 0;
  double sumSeconds = 0;
  void add(double seconds);
};

inline void WaitHistogram::add(double seconds) {
  size_t b = 0;
  while (b < kWaitBounds.size() && seconds > kWaitBounds[b]) ++b;
  ++buckets[b];
  ++count;
  sumSeconds += seconds;
}

// Indices of the by-kind, by-algorithm and by-wire counters: Kind, Algorithm and Wire's values
// (core/control/message.h, ops/communicator.h, ops/codec/wire.h).
inline constexpr size_t kKindCount = 7;       // allreduce ... process set change
inline constexpr size_t kAlgorithmCount = 3;  // ring, cerar, adasum
inline constexpr size_t kWireCount = 4;       // none, fp16, bf16, int8

// The counters kept per process set (RuntimeStats::bySet): the by-kind units and tensors and
// the all-reduce buffers and bytes by algorithm and wire, as in RuntimeStats.
struct SetCounters {
  int32_t set = 0;  // the process set's id (0: every rank)
  std::array<uint64_t, kKindCount> unitsByKind{};
  std::array<uint64_t, kKindCount> tensorsByKind{};
  std::array<std::array<uint64_t, kWireCount>, kAlgorithmCount> allreduceBuffers{};
  std::array<std::array<uint64_t, kWireCount>, kAlgorithmCount> allreduceBytesSent{};
};

// One level's link figures of the cost model (LinkModel), fixed at start.
struct LinkFigures {
  bool probed = false;  // timed by the link probe; false: LinkModel's defaults or a test's
  double alpha = 0;     // a round's latency, seconds
  double beta = 0;      // seconds per byte
};

// Counters for tests and benchmarks.
struct RuntimeStats {
  uint64_t cycles = 0;
  bool sharedMemory = false;      // the job's data moves through shared memory (this host's)
  uint64_t cacheHits = 0;
  uint64_t cacheMisses = 0;
  uint64_t fusedBuffers = 0;      // collectives dispatched for allreduce
  uint64_t tensorsReduced = 0;
  // Payload bytes this rank sent and received on the data links for every collective (what
  // the algorithms move; the non-finite check's flags and other agreement bits are in neither).
  uint64_t bytesSent = 0;
  uint64_t bytesReceived = 0;
  uint64_t ringBuffers = 0;
  uint64_t cerarBuffers = 0;
  uint64_t wireBuffers = 0;       // of ringBuffers, those sent with a lossy wire
  // Budget-chosen fp16 buffers whose guard refused the wire: sent by the float32 ring.
  uint64_t wireFallbacks = 0;
  uint64_t budgetBuffers = 0;     // allreduce buffers decided within CERAR_MAX_ERROR
  // The last allreduce buffer as run: "ring", "ring-fp16", "ring-bf16" or "cerar".
  std::string lastChoice;
  // Buffers decided as CERAR that ran on the exact ring (counted in ringBuffers) because some
  // rank's input held a NaN, an Inf or a value near overflow (cerar-protocol.md).
  uint64_t nonFiniteFallbacks = 0;
  // Of ringBuffers and cerarBuffers, those reduced host by host (ops/hierarchical.h).
  uint64_t hierarchicalBuffers = 0;
  int lastComponents = 0;         // c of the last allreduce buffer as run (N for the ring)
  uint64_t allgatherBuffers = 0;      // fused buffers dispatched for allgather
  uint64_t reducescatterBuffers = 0;  // fused buffers dispatched for reducescatter
  uint64_t tensorsScattered = 0;      // tensors they held
  // The error per fused buffer of CERAR, of a lossy wire, and of any buffer decided within a
  // budget (0 while none ran): the bound predicted by the spec's error terms, relative to
  // max sum_i |g_i| (always; core/policy/error_budget.h), and, with debugError, the measured
  // max |result - exact float32 ring| / max |exact ring| over this rank's elements for CERAR
  // and lossy wire buffers (last buffer, worst, and the sum over measuredBuffers buffers).
  double predictedErrorMax = 0;
  double predictedErrorLast = 0;
  double measuredErrorLast = 0;
  double measuredErrorMax = 0;
  double measuredErrorSum = 0;
  uint64_t measuredBuffers = 0;
  // The negotiation's control messages (reports up the control tree, answers down) and their
  // bytes on the links, frames included (ops/control_frame.h): per cycle a rank sends and
  // receives one message per link of the tree it has, at most the fanout + 1 (docs/scale.md).
  uint64_t controlMessagesSent = 0;
  uint64_t controlMessagesReceived = 0;
  uint64_t controlBytesSent = 0;
  uint64_t controlBytesReceived = 0;
  // This rank's requests to the rendezvous store and their bytes each way (hello, job
  // settings, the links' addresses, the loss mark); fixed after start unless a rank is lost.
  uint64_t rendezvousRequests = 0;
  uint64_t rendezvousBytesSent = 0;
  uint64_t rendezvousBytesReceived = 0;
  // This rank's data links (TCP) connected so far: size - 1 once every link is made, fewer
  // with links made on demand (CERAR_LAZY_LINKS; docs/scale.md). 0 without Gloo links.
  uint64_t dataLinks = 0;
  // The parameters in force, as the coordinator rank's last response set them (the same on
  // every rank), and where autotuning stands (docs/autotune.md).
  uint64_t fusionThresholdBytes = 0;
  double cycleTimeMs = 0;
  double componentsScale = 1.0;   // the factor on the cost model's c
  bool autotuning = false;        // CERAR_AUTOTUNE and still sampling
  bool autotuneFrozen = false;    // sampling done; the parameters are its best
  // Units this rank took part in and their tensors, by Kind, as responses reached it.
  std::array<uint64_t, kKindCount> unitsByKind{};
  std::array<uint64_t, kKindCount> tensorsByKind{};
  // Fused all-reduce buffers as run (after fallbacks) and the bytes this rank sent for them,
  // by [algorithm][wire].
  std::array<std::array<uint64_t, kWireCount>, kAlgorithmCount> allreduceBuffers{};
  std::array<std::array<uint64_t, kWireCount>, kAlgorithmCount> allreduceBytesSent{};
  // Per unit of this rank: from its enqueue to the coordinator's answer that runs it. Large
  // where this rank waits for the others; the rank they wait for has the smallest.
  WaitHistogram negotiationWait;
  // Per collective run on the host: the seconds this rank was blocked in the transport on its
  // peers, for their data or for room to send (ops/transport/timed.h). The rank the others
  // wait for has the smallest; unlike negotiationWait it holds no coordinator cycle.
  WaitHistogram transportWait;
  // The by-set counters, one element per process set this rank counted in (few: a vector, so
  // the per-cycle copy reuses its memory).
  std::vector<SetCounters> bySet;
  // Stall warnings logged (the coordinator rank inspects; 0 elsewhere).
  uint64_t stallWarnings = 0;
  // The link figures in force (core/policy/link_probe.h; the same on every rank): the job's
  // links (alpha, beta), and in a layered job (hostStep) the host step's (localAlpha,
  // localBeta). Zero until the probe has run.
  LinkFigures link;
  // The probe's verdict on the job's links and the pacing it set (docs/pacing.md): the CPU,
  // not a queue, bounds a free stream (receives are then posted in step); the window of bytes
  // in flight per link (0: none).
  bool linkCpuBound = false;
  uint64_t linkWindowBytes = 0;
  bool hostStep = false;
  LinkFigures hostLink;
};

// `stats`' counters of set `id`, added at the end the first time.
inline SetCounters& setCounters(RuntimeStats& stats, int32_t id) {
  for (SetCounters& c : stats.bySet) {
    if (c.set == id) return c;
  }
  stats.bySet.emplace_back().set = id;
  return stats.bySet.back();
}

}  // namespace cerar
