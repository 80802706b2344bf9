// The runtime's counters (Runtime::stats()).
#pragma once

#include <cstdint>
#include <string>

namespace cerar {

// Counters for tests and benchmarks.
struct RuntimeStats {
  uint64_t cycles = 0;
  bool sharedMemory = false;      // the job's data moves through shared memory (this host's)
  uint64_t cacheHits = 0;
  uint64_t cacheMisses = 0;
  uint64_t fusedBuffers = 0;      // collectives dispatched for allreduce
  uint64_t tensorsReduced = 0;
  uint64_t bytesSent = 0;
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
  // The negotiation's control messages (one gather to rank 0 and one broadcast from it per
  // cycle) and their bytes on the links, frames included (ops/control_frame.h): per cycle a
  // worker sends and receives one message, rank 0 receives and sends size-1 (docs/scale.md).
  uint64_t controlMessagesSent = 0;
  uint64_t controlMessagesReceived = 0;
  uint64_t controlBytesSent = 0;
  uint64_t controlBytesReceived = 0;
  // This rank's requests to the rendezvous store and their bytes each way (hello, job
  // settings, the links' addresses, the loss mark); fixed after start unless a rank is lost.
  uint64_t rendezvousRequests = 0;
  uint64_t rendezvousBytesSent = 0;
  uint64_t rendezvousBytesReceived = 0;
  // The parameters in force, as the coordinator rank's last response set them (the same on
  // every rank), and where autotuning stands (docs/autotune.md).
  uint64_t fusionThresholdBytes = 0;
  double cycleTimeMs = 0;
  double componentsScale = 1.0;   // the factor on the cost model's c
  bool autotuning = false;        // CERAR_AUTOTUNE and still sampling
  bool autotuneFrozen = false;    // sampling done; the parameters are its best
};

}  // namespace cerar
