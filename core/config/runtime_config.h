// The runtime's settings (core/config/config.h reads and checks them).
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "core/types.h"
#include "ops/control_tree.h"

namespace cerar {

// Settings, from the environment by default (names as Horovod's, prefixed CERAR_).
// Per rank: identity, rendezvous (address, port, secret, its timeout), interface, log level,
// timeline path, hooks. Every other setting is job-wide: at start every rank adopts rank 0's
// value and logs a warning naming both values where its own differed (core/config/job_config.h;
// docs/settings.md, "Every knob").
struct RuntimeConfig {
  int rank = 0, size = 1, localRank = 0, localSize = 1;
  std::string rendezvousAddr = "127.0.0.1";
  int rendezvousPort = 0;
  std::string secret;
  // The job's identity (docs/rendezvous.md, "One job, one store"): CERAR_JOB_ID, else the
  // launcher's (cerarrun's, Open MPI's job, SLURM's job and step, torchrun's run at its master).
  // Presented at the store's hello and in the single-host socket's name; empty: none known.
  std::string jobId;
  // Network interface of the data links ("" = the route to the rendezvous host;
  // rendezvous/data_address.h), and the variable that named it (CERAR_IFACE, or its
  // aliases GLOO_SOCKET_IFNAME and HOROVOD_GLOO_IFACE), for messages.
  std::string iface;
  std::string ifaceVariable = "CERAR_IFACE";
  size_t fusionThresholdBytes = 64u << 20;    // CERAR_FUSION_THRESHOLD; 0 disables fusion
  double cycleTimeMs = 1.0;                   // CERAR_CYCLE_TIME
  size_t cacheCapacity = 1024;                // CERAR_CACHE_CAPACITY; 0 disables the cache
  // CERAR_CONTROL_FANOUT: children per rank in the control tree every negotiation cycle
  // travels (ops/control_tree.h). Job-wide.
  int controlFanout = kDefaultControlFanout;
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
  // the fastest of the exact ring, CERAR and, as CERAR_COMPRESSION allows, lossy wires,
  // among those predicted to fit (docs/wires.md, "Error budget"). 0: unset. Job-wide.
  double maxError = 0;
  // CERAR_ERROR_BOUND: calibrated | strict, what CERAR_MAX_ERROR compares against: errors
  // measured under in 99.9 % of buffers, or the worst-case bounds (core/policy/error_calibration.h).
  std::string errorBound = "calibrated";
  // CERAR_ERROR_FEEDBACK: what a lossy wire lost of a tensor on this rank is added to the
  // tensor's next all-reduce of the same name (core/execution/error_feedback.h). Job-wide.
  bool errorFeedback = false;
  // CERAR_SHARED_MEMORY: ranks that all share one host exchange data through a shared-memory
  // segment instead of TCP loopback (ops/transport/shm.h; docs/shared-memory.md). Job-wide.
  bool sharedMemory = true;
  // CERAR_LAZY_LINKS: the data links connect at start only where the plans' ring and control
  // tree need them; any other connects on its first use (ops/transport/lazy_links.h;
  // docs/scale.md, "Links made on demand"). Job-wide.
  bool lazyLinks = true;
  // Not a setting: set at start when the job's data moves through shared memory, where CERAR
  // and the lossy wires have nothing to save (auto then takes the exact ring).
  bool linksInMemory = false;
  // CERAR_HIERARCHICAL_ALLREDUCE: 0 | 1 | auto, whether the host sums of a job on several hosts
  // run host by host (ops/hierarchical.h; docs/hierarchical.md). Job-wide.
  std::string hierarchicalAllreduce = "auto";
  // Not settings: set at start from the hosts the ranks agreed on (core/config/host_topology.h),
  // where the job is layered (more than one host, as many ranks on each, more than one);
  // hosts 1 otherwise.
  int hosts = 1, ranksPerHost = 1;
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
  bool timelineMarkCycles = false;            // CERAR_TIMELINE_MARK_CYCLES
  // CERAR_METRICS_PORT: Prometheus metrics on this port + local rank, served by the Python
  // layer (frameworks/cerar/_metrics.py; docs/metrics.md); 0 = none. Per rank.
  int metricsPort = 0;
  double stallCheckSeconds = 60;              // CERAR_STALL_CHECK_TIME_SECONDS
  double stallShutdownSeconds = 0;            // CERAR_STALL_SHUTDOWN_TIME_SECONDS; 0 = never
  double timeoutSeconds = 60;                 // CERAR_TIMEOUT_SECONDS: a dead peer's limit
  // CERAR_RENDEZVOUS_TIMEOUT_SECONDS: this rank's limit for reaching the store and rank 0's
  // settings (per rank: it applies before ranks can talk); 0 = its timeoutSeconds.
  double rendezvousTimeoutSeconds = 0;
  // CERAR_RENDEZVOUS_SCOPE: the store keys of this start live under it, agreed by every rank
  // (an elastic generation's name); empty: each rank counts its own starts on the store, which
  // agree only while every rank starts as often.
  std::string rendezvousScope;
  std::string logLevel = "warning";           // CERAR_LOG_LEVEL
  // Rank 0 hosts the rendezvous store (torchrun, mpirun, SLURM); under cerarrun the launcher
  // hosts it. CERAR_HOST_STORE overrides.
  bool hostStore = false;
  // Time the links at start for the cost model (a few ms); false keeps LinkModel's defaults.
  bool measureLink = true;
  // Testing: this rank's link figures (alpha s, beta s/byte, gamma s/byte) instead of the
  // probe's. Ranks may differ: only the coordinator rank's are used, since it decides.
  std::optional<std::array<double, 3>> linkFigures;
  // Testing, with linkFigures (whose gamma is CERAR's codec): the exact ring's add and a 16-bit
  // wire hop, seconds per float32 byte; without them the ring is charged gamma, the wire 2 gamma.
  std::optional<std::array<double, 2>> computeFigures;
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
  // (docs/rendezvous.md), and the knobs; a bad value throws Error naming it.
  static RuntimeConfig fromEnvironment();
};

}  // namespace cerar
