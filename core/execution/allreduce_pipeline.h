// A fused all-reduce's steps, written once for every placement: pack the group's tensors into
// one buffer (times the prescale; a joined rank's share is the op's identity), reduce it,
// unpack it into the outputs (times the postscale, and 1/N for an average). Where the buffer
// lives and how bytes get in and out is the memory's: the host's (host units, and mixed ones
// whose device tensors are copied in and out) or a device's (run on its DeviceQueue).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "core/device/device.h"
#include "ops/adasum_run.h"
#include "ops/hierarchical.h"
#include "ops/communicator.h"

namespace cerar {

// One tensor of the group.
struct PipelinePart {
  const void* in = nullptr;  // null: a joined rank's share (the op's identity)
  void* out = nullptr;
  size_t offset = 0;    // in the buffer, elements
  size_t elements = 0;
  int inDevice = -1;    // where `in` and `out` are (-1: host memory)
  int outDevice = -1;
  // Host memory: the producers' events, waited for before a device tensor is copied in (a
  // device queue's job owns its events instead).
  const std::vector<DeviceEvent>* ready = nullptr;
  // Host float32 only: added to the packed values (error feedback, core/execution/error_feedback.h).
  const float* residual = nullptr;
};

struct PipelineJob {
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t total = 0;             // elements
  double prescale = 1.0;
  double factor = 1.0;          // postscale / (N for an average)
  void* direct = nullptr;       // reduced in this output (the group's one tensor, its own)
  std::byte* input = nullptr;   // debug error mode: the packed buffer is copied here, ...
  std::byte* result = nullptr;  // ... and the reduced one here (host memory, total elements)
  float* lost = nullptr;        // error feedback: the wire's losses (AllreduceOptions::lost)
};

class PipelineMemory {
 public:
  virtual ~PipelineMemory() = default;
  // The fusion buffer, of at least `bytes`, kept between groups.
  virtual std::byte* buffer(size_t bytes) = 0;
  // Every part with an input, copied to buffer + offset times `factor`.
  virtual void pack(const std::vector<PipelinePart>& parts, std::byte* buffer,
                    const PipelineJob& job) = 0;
  virtual void fillIdentity(const PipelineJob& job, std::byte* at, size_t elements) = 0;
  virtual void toHost(std::byte* host, const std::byte* buffer, size_t bytes) = 0;
  virtual RunStats reduce(std::byte* buffer, const PipelineJob& job) = 0;
  // The buffer times job.factor into every part's output (in place for a direct job), unless
  // the host's communicator applied it (AllreduceOptions::postscale).
  virtual void unpack(const std::vector<PipelinePart>& parts, std::byte* buffer,
                      const PipelineJob& job) = 0;
};

// Called at the end of packing and of reducing (the timeline's phases).
using PipelinePhase = std::function<void(const char* phaseDone)>;

RunStats runPipeline(PipelineMemory& memory, const std::vector<PipelinePart>& parts,
                     const PipelineJob& job, const PipelinePhase& phase = {});

// Host memory. CERAR's range test rides on the packing copies, so the communicator need not
// read the buffer again; a device tensor of a mixed unit is copied through `devices`.
class HostPipelineMemory : public PipelineMemory {
 public:
  struct Reducer {
    Communicator* communicator;
    AllreduceOptions options;
    int ranks;
    AdasumRunner* adasum = nullptr;  // set: Adasum, per tensor of the group
    Transport* transport = nullptr;  // Adasum's
    // Set: host by host (the decision's algorithm is the step across hosts); it tests CERAR's
    // range on the partial sums itself.
    HierarchicalAllreduce* hierarchy = nullptr;
  };
  HostPipelineMemory(std::vector<std::byte>& fusion, DeviceSlot& devices, Reducer reducer)
      : fusion_(fusion), devices_(devices), reducer_(std::move(reducer)) {}
  std::byte* buffer(size_t bytes) override;
  void pack(const std::vector<PipelinePart>& parts, std::byte* buffer,
            const PipelineJob& job) override;
  void fillIdentity(const PipelineJob& job, std::byte* at, size_t elements) override;
  void toHost(std::byte* host, const std::byte* buffer, size_t bytes) override;
  RunStats reduce(std::byte* buffer, const PipelineJob& job) override;
  void unpack(const std::vector<PipelinePart>& parts, std::byte* buffer,
              const PipelineJob& job) override;

 private:
  // Whether reduce() has the communicator apply job.factor (AllreduceOptions::postscale).
  bool communicatorScales(const PipelineJob& job) const;

  std::vector<std::byte>& fusion_;
  DeviceSlot& devices_;
  Reducer reducer_;
  bool beyond_ = false;  // a packed value is beyond CERAR's range
  std::vector<size_t> sizes_;  // Adasum's tensors
};

// A device's memory, on its queue's thread: batched copies, scale kernels, the device
// all-reduce (which tests CERAR's range itself).
class DevicePipelineMemory : public PipelineMemory {
 public:
  // byHost: host by host (the options are the step across hosts).
  DevicePipelineMemory(DeviceOps& ops, AllreduceOptions options, bool byHost = false)
      : ops_(ops), options_(std::move(options)), byHost_(byHost) {}
  std::byte* buffer(size_t bytes) override { return ops_.fusionBuffer(bytes); }
  void pack(const std::vector<PipelinePart>& parts, std::byte* buffer,
            const PipelineJob& job) override;
  void fillIdentity(const PipelineJob& job, std::byte* at, size_t elements) override {
    ops_.fillIdentity(job.dtype, job.op, at, elements);
  }
  void toHost(std::byte* host, const std::byte* buffer, size_t bytes) override {
    ops_.download(host, buffer, bytes);
  }
  RunStats reduce(std::byte* buffer, const PipelineJob& job) override {
    return byHost_ ? ops_.allreduceByHost(buffer, job.total, job.dtype, options_)
                   : ops_.allreduce(buffer, job.total, job.dtype, options_);
  }
  void unpack(const std::vector<PipelinePart>& parts, std::byte* buffer,
              const PipelineJob& job) override;

 private:
  DeviceOps& ops_;
  AllreduceOptions options_;
  bool byHost_;
};

}  // namespace cerar
