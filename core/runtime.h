// The cerar runtime: a background coordinator that negotiates, fuses and dispatches
// collectives enqueued from any thread (Horovod-style). One Runtime object per process,
// created by init(); no file-scope globals, so init -> shutdown -> init works.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/codec/wire.h"
#include "ops/common/dtype.h"
#include "ops/common/status.h"

namespace cerar {

class Transport;
class DeviceOps;
struct DeviceSetup;

// Makes the device side of a runtime for CUDA device `device` (-1: its own choice); set by
// builds with CUDA (core/cuda/cuda_device_ops.h) and by tests. See core/device.h.
using DeviceOpsFactory =
    std::function<std::unique_ptr<DeviceOps>(int device, const DeviceSetup& setup)>;

// User-level reduction: average divides by the full size (joined ranks included); Adasum is
// the adaptive summation of floating tensors on a power-of-two number of ranks (docs/adasum.md).
enum class Op : uint8_t { kSum, kAverage, kMin, kMax, kAdasum };
const char* opName(Op op);

// A view of a tensor's memory; the caller keeps it alive until the operation completes.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  int device = -1;  // -1: host memory; >= 0: CUDA device ordinal
  // CUDA tensors: the cudaStream_t whose work so far produces the data (null: the default
  // stream). The runtime orders its own work after it; no host synchronisation is needed.
  void* stream = nullptr;
  size_t elements() const;
  size_t bytes() const;
};

// Called once on the coordinator thread when an operation ends; `status` is ok on success.
// An operation refused at enqueue (bad arguments, duplicate name, shut down) calls it at once
// on the enqueuing thread.
using Callback = std::function<void(const Status& status)>;

struct OperationState;

// The handle of one asynchronous operation. Copyable; all copies refer to one operation.
// Thread safety: every member may be called from any thread.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<OperationState> state);
  // True once the operation has ended, successfully or not.
  bool poll() const;
  // Blocks until the operation ends; throws the cerar::Error subclass of its status's code
  // (ops/common/error.h): TimeoutError, PeerLostError, MismatchError, ShutDownError, ...
  void wait() const;
  // Like wait() with a limit; returns false if the operation is still running.
  bool waitFor(std::chrono::milliseconds limit) const;
  // allgather: the gathered bytes (ranks in order) and their shape; valid after wait().
  const std::vector<std::byte>& output() const;
  const std::vector<int64_t>& outputShape() const;
  // alltoall: the rows received from each rank, in rank order; grouped allgather: the rows of
  // every rank and tensor; valid after wait().
  const std::vector<int64_t>& receivedSplits() const;
  // join: the rank that joined last; valid after wait().
  int lastJoinedRank() const;
  // addProcessSet: the new set's id; valid after wait().
  int32_t processSetId() const;

 private:
  std::shared_ptr<OperationState> state_;
};

// Settings, from the environment by default (names as Horovod's, prefixed CERAR_).
// Per rank: identity, rendezvous (address, port, secret, its timeout), interface, log level,
// timeline path, hooks. Every other setting is job-wide: at start every rank adopts rank 0's
// value and logs a warning naming both values where its own differed (core/job_config.h;
// README, "Runtime knobs").
struct RuntimeConfig {
  int rank = 0, size = 1, localRank = 0, localSize = 1;
  std::string rendezvousAddr = "127.0.0.1";
  int rendezvousPort = 0;
  std::string secret;
  // Network interface of the data links ("" = the route to the rendezvous host;
  // core/rendezvous/data_address.h), and the variable that named it (CERAR_IFACE, or its
  // aliases GLOO_SOCKET_IFNAME and HOROVOD_GLOO_IFACE), for messages.
  std::string iface;
  std::string ifaceVariable = "CERAR_IFACE";
  size_t fusionThresholdBytes = 64u << 20;    // CERAR_FUSION_THRESHOLD; 0 disables fusion
  double cycleTimeMs = 1.0;                   // CERAR_CYCLE_TIME
  size_t cacheCapacity = 1024;                // CERAR_CACHE_CAPACITY; 0 disables the cache
  std::string algorithm = "auto";             // CERAR_ALGORITHM: auto | ring | cerar
  int components = 0;                         // CERAR_COMPONENTS; 0 = cost model
  // CERAR_COMPONENTS_SCALE: a factor on the cost model's c (rounded to a multiple of N); the
  // autotuner's third knob, settable to keep a tuned value in later jobs.
  double componentsScale = 1.0;
  double eps = 0;                             // CERAR_EPS; 0 = the spec's default per dtype
  bool shareCorrection = false;               // CERAR_SHARE_CORRECTION: share-corrected decoding
  // CERAR_COMPRESSION: none | fp16 | bf16, the wire of float32 sums on the host that ask for
  // none themselves (docs/wires.md). Job-wide.
  std::string compression = "none";
  // CERAR_MAX_ERROR: an error budget relative to max |sum|; > 0 makes auto choose per buffer
  // the fastest of the exact ring, CERAR and, as CERAR_COMPRESSION allows, 16-bit wires,
  // among those predicted to fit (docs/wires.md, "Error budget"). 0: unset. Job-wide.
  double maxError = 0;
  // CERAR_DEBUG_ERROR: also reduce each CERAR or 16-bit-wire buffer with the exact float32
  // ring (doubles the traffic) and record the measured error. Job-wide (docs/settings.md).
  bool debugError = false;
  // CERAR_AUTOTUNE: the coordinator rank tunes the fusion threshold, the cycle time and
  // CERAR's c while the job runs, then freezes the best (docs/autotune.md). Job-wide, as its
  // log path (written by rank 0 only: one CSV line per sample) and its sample counts.
  bool autotune = false;
  std::string autotuneLog;                    // CERAR_AUTOTUNE_LOG
  int autotuneWarmupSamples = 3;              // CERAR_AUTOTUNE_WARMUP_SAMPLES
  int autotuneStepsPerSample = 10;            // CERAR_AUTOTUNE_STEPS_PER_SAMPLE
  std::string timeline;                       // CERAR_TIMELINE
  double stallCheckSeconds = 60;              // CERAR_STALL_CHECK_TIME_SECONDS
  double stallShutdownSeconds = 0;            // CERAR_STALL_SHUTDOWN_TIME_SECONDS; 0 = never
  double timeoutSeconds = 60;                 // CERAR_TIMEOUT_SECONDS: a dead peer's limit
  // CERAR_RENDEZVOUS_TIMEOUT_SECONDS: this rank's limit for reaching the store and rank 0's
  // settings (per rank: it applies before ranks can talk); 0 = its timeoutSeconds.
  double rendezvousTimeoutSeconds = 0;
  std::string logLevel = "warning";           // CERAR_LOG_LEVEL
  // Rank 0 hosts the rendezvous store (torchrun, mpirun, SLURM); under cerarrun the launcher
  // hosts it. CERAR_HOST_STORE overrides.
  bool hostStore = false;
  // Time the links at start for the cost model (a few ms); false keeps LinkModel's defaults.
  bool measureLink = true;
  // Testing: this rank's link figures (alpha s, beta s/byte, gamma s/byte) instead of the
  // probe's. Ranks may differ: only the coordinator rank's are used, since it decides.
  std::optional<std::array<double, 3>> linkFigures;
  // Device tensors: how ranks exchange them (CERAR_DEVICE_TRANSPORT): nccl (P2P on the GPUs),
  // gloo (staged through pinned host memory over the runtime's TCP links), or auto (nccl when
  // every rank has its own GPU, else gloo).
  std::string deviceTransport = "auto";
  // CERAR_DYNAMIC_PROCESS_SETS (or HOROVOD_DYNAMIC_PROCESS_SETS): process sets may be added
  // and removed after init, not only given to it (the Python layers check it). Job-wide.
  bool dynamicProcessSets = false;
  // Empty: CUDA tensors are refused. Runtime::start sets it in builds with CUDA.
  DeviceOpsFactory deviceOps;
  // Where log lines go; empty: stderr. Called from the coordinator thread.
  std::function<void(const std::string& line)> logSink;

  // Reads the launcher's variables (CERAR_RANK, ...), or torchrun's, Open MPI's or SLURM's
  // (architecture.md, "Conventions"), and the knobs; a bad value throws Error naming it.
  static RuntimeConfig fromEnvironment();
};

// Counters for tests and benchmarks.
struct RuntimeStats {
  uint64_t cycles = 0;
  uint64_t cacheHits = 0;
  uint64_t cacheMisses = 0;
  uint64_t fusedBuffers = 0;      // collectives dispatched for allreduce
  uint64_t tensorsReduced = 0;
  uint64_t bytesSent = 0;
  uint64_t ringBuffers = 0;
  uint64_t cerarBuffers = 0;
  uint64_t wireBuffers = 0;       // of ringBuffers, those sent with a 16-bit wire
  // Budget-chosen fp16 buffers whose guard refused the wire: sent by the float32 ring.
  uint64_t wireFallbacks = 0;
  uint64_t budgetBuffers = 0;     // allreduce buffers decided within CERAR_MAX_ERROR
  // The last allreduce buffer as run: "ring", "ring-fp16", "ring-bf16" or "cerar".
  std::string lastChoice;
  // Buffers decided as CERAR that ran on the exact ring (counted in ringBuffers) because some
  // rank's input held a NaN, an Inf or a value near overflow (cerar-protocol.md).
  uint64_t nonFiniteFallbacks = 0;
  int lastComponents = 0;         // c of the last allreduce buffer as run (N for the ring)
  uint64_t allgatherBuffers = 0;      // fused buffers dispatched for allgather
  uint64_t reducescatterBuffers = 0;  // fused buffers dispatched for reducescatter
  uint64_t tensorsScattered = 0;      // tensors they held
  // The error per fused buffer of CERAR, of a 16-bit wire, and of any buffer decided within a
  // budget (0 while none ran): the bound predicted by the spec's error terms, relative to
  // max sum_i |g_i| (always; core/error_budget.h), and, with debugError, the measured
  // max |result - exact float32 ring| / max |exact ring| over this rank's elements for CERAR
  // and 16-bit wire buffers (last buffer, worst, and the sum over measuredBuffers buffers).
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

class Runtime {
 public:
  // Connects to the other ranks and starts the coordinator thread.
  static std::unique_ptr<Runtime> start(const RuntimeConfig& config);
  // Starts over a transport the caller connected (e.g. in-process ranks as threads); rank and
  // size come from the transport. Every rank's coordinator drives it alone from then on.
  static std::unique_ptr<Runtime> startWith(const RuntimeConfig& config,
                                            std::shared_ptr<Transport> transport);
  virtual ~Runtime() = default;

  // Joins the coordinator; pending operations fail with ShutDownError.
  // Idempotent; also done by the destructor.
  virtual void shutdown() = 0;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int localRank() const = 0;
  virtual int localSize() const = 0;

  // Every operation is matched across ranks by name; a name may be in flight only once.
  // `output` may alias `input` (in place).
  // `wire`: fp16 or bf16 asks for that 16-bit wire on the exact ring for a float32 sum on the
  // host (docs/wires.md); kNone leaves it to the job (CERAR_COMPRESSION). Negotiated: ranks
  // asking differently fail with a mismatch.
  virtual Handle allreduce(const std::string& name, Tensor input, Tensor output, Op op,
                           double prescale = 1.0, double postscale = 1.0,
                           Callback callback = {}, Wire wire = Wire::kNone,
                           int32_t processSet = 0) = 0;
  // Fused as one unit: all or none are dispatched together.
  virtual Handle groupedAllreduce(const std::vector<std::string>& names,
                                  std::vector<Tensor> inputs, std::vector<Tensor> outputs, Op op,
                                  double prescale = 1.0, double postscale = 1.0,
                                  Callback callback = {}, Wire wire = Wire::kNone,
                           int32_t processSet = 0) = 0;
  // Reduces each input across ranks and leaves this rank its share of the first dimension in
  // the output (scatterRows of it, the ranks' shares in rank order, as Horovod splits it);
  // the inputs have the same shapes on every rank, an output has the input's shape but for the
  // first dimension. Several names are one unit, as a grouped allreduce; units are fused.
  virtual Handle reducescatter(const std::vector<std::string>& names, std::vector<Tensor> inputs,
                               std::vector<Tensor> outputs, Op op, double prescale = 1.0,
                               double postscale = 1.0, Callback callback = {},
                               int32_t processSet = 0) = 0;
  // Sends splits[j] rows (first dimension, in order) of `input` to rank j and concatenates the
  // rows received from every rank in rank order (the handle's output; receivedSplits() says
  // how many came from each). splits has one entry per rank, summing to at most the first
  // dimension; empty splits the first dimension equally (it must divide by the size).
  virtual Handle alltoall(const std::string& name, Tensor input, std::vector<int64_t> splits,
                          Callback callback = {}, int32_t processSet = 0) = 0;
  // Concatenates along the first dimension, which may differ per rank.
  virtual Handle allgather(const std::string& name, Tensor input, Callback callback = {},
                           int32_t processSet = 0) = 0;
  // allgather of several tensors (one dtype) as one unit: the handle's output holds tensor 0
  // gathered, then tensor 1, ..., as a flat array, and receivedSplits() the rows of every rank
  // and tensor (rank-major: [rank * tensors + tensor]).
  virtual Handle groupedAllgather(const std::vector<std::string>& names,
                                  std::vector<Tensor> inputs, Callback callback = {},
                                  int32_t processSet = 0) = 0;
  // In place: every rank ends with root's tensor.
  virtual Handle broadcast(const std::string& name, Tensor tensor, int root,
                           Callback callback = {}, int32_t processSet = 0) = 0;
  virtual Handle barrier(Callback callback = {}, int32_t processSet = 0) = 0;
  // This rank has run out of data: others' all-reduces and barriers complete without it (it
  // contributes the op's identity) until every rank has joined; an allgather, broadcast,
  // alltoall or reducescatter meanwhile fails on every rank (InvalidArgumentError naming the
  // joined rank), as Horovod's.
  virtual Handle join(Callback callback = {}) = 0;

  // Process sets (Horovod's; docs/process-sets.md). Every operation above takes the id of the
  // set it runs in (0: every rank, the default); ranks and sizes in it are the set's (the
  // ranks' order is the global one), but a broadcast's root is a global rank. A rank outside
  // the set is refused with InvalidArgumentError. Each set negotiates, fuses, caches and
  // reduces on its own, over the job's links.
  // Adds a set of these global ranks: every rank of the job calls it, in the same order as
  // the other changes; the handle's processSetId() is the new id. A set of the same ranks
  // fails with InvalidArgumentError.
  virtual Handle addProcessSet(std::vector<int> ranks, Callback callback = {}) = 0;
  // Removes set `id` (not 0), every rank together; its operations still pending fail.
  virtual Handle removeProcessSet(int32_t id, Callback callback = {}) = 0;
  // The global ranks of set `id` as this rank knows it now (none: no such set).
  virtual std::optional<std::vector<int>> processSetRanks(int32_t id) const = 0;
  virtual std::vector<int32_t> processSetIds() const = 0;
  // The job's CERAR_DYNAMIC_PROCESS_SETS (agreed at start): whether the Python layers let
  // sets change after init.
  virtual bool dynamicProcessSets() const = 0;

  virtual void startTimeline(const std::string& path) = 0;
  virtual void stopTimeline() = 0;
  // A consistent copy of the counters. Once a handle has completed (wait() returned, or its
  // callback ran), its operation's effects (buffers, bytes, errors) are in the stats of the rank
  // that enqueued it; the coordinator publishes them before completing the handles.
  virtual RuntimeStats stats() const = 0;
};

}  // namespace cerar
