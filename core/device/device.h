// Device (CUDA) memory in the runtime. The runtime talks to the device through DeviceOps so
// that core/ builds and is tested without CUDA: the CUDA build supplies cudaDeviceOps()
// (core/device/cuda/cuda_device_ops.h), tests substitute host memory.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/types.h"
#include "ops/communicator.h"

namespace cerar {

// A point in a device stream's work (a CUDA event); null: nothing to wait for.
using DeviceEvent = std::shared_ptr<void>;

// The channel (Transport::channel) of the device work's transfers; process sets take small
// tags, so this one is never theirs.
constexpr uint32_t kDeviceChannelTag = 0xD0000000u;
// A layered job's two levels for device work (ops/hierarchical.h): the host's ranks, and the
// ranks of this rank's local rank across hosts.
constexpr uint32_t kDeviceLocalChannelTag = 0xD0000001u;
constexpr uint32_t kDeviceCrossChannelTag = 0xD0000002u;

// One slice of a batched device-to-device copy.
struct DeviceCopy {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};

// What a DeviceOps may use: a channel of the runtime's links for device work alone (driven by
// the DeviceQueue's thread, where allreduce() runs, while the coordinator drives the others)
// and the runtime's settings.
struct DeviceSetup {
  std::shared_ptr<Transport> transport;
  // A layered job's levels over links of their own (null otherwise): this rank's host, and
  // the ranks of its local rank, one per host.
  std::shared_ptr<Transport> local, cross;
  std::string transportKind = "auto";  // CERAR_DEVICE_TRANSPORT: auto | nccl | gloo
  int localRank = 0;
  std::chrono::milliseconds timeout{60000};
};

// One rank's device work, on one device and one stream of its own (the runtime stream).
// ready() and wait() may be called from any thread; everything else from one thread (the
// DeviceQueue's, core/device/device_queue.h), and it is enqueued on the runtime stream in call order.
class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual int device() const = 0;
  // An event after the work enqueued so far on `stream` (a cudaStream_t of device(); null:
  // the default stream), e.g. the kernels that produced a gradient.
  virtual DeviceEvent ready(void* stream) = 0;
  // Waits on the host for `event`; false when `timeout` passes first. Throws Error on a
  // device error.
  virtual bool wait(const DeviceEvent& event, std::chrono::milliseconds timeout) = 0;

  // Later work on the runtime stream waits for `event` (no host wait).
  virtual void after(const DeviceEvent& event) = 0;
  // A device buffer of at least `bytes`, kept and reused between calls.
  virtual std::byte* fusionBuffer(size_t bytes) = 0;
  // Every copy, in one launch; slices must not overlap.
  virtual void copy(const std::vector<DeviceCopy>& copies) = 0;
  // In place, as scaledCopy (core/execution/scaling.h) and fillIdentity do on the host, bit for bit.
  virtual void scale(DType dtype, void* data, size_t n, double factor) = 0;
  virtual void fillIdentity(DType dtype, ReduceOp op, void* data, size_t n) = 0;
  // Host <-> device copies that return once done (they follow the runtime stream's work).
  virtual void download(void* host, const void* device, size_t bytes) = 0;
  virtual void upload(void* device, const void* host, size_t bytes) = 0;
  // The all-reduce of `data` (device memory) with every rank; collective, like
  // Communicator::allreduce, and bit-identical to it. Returns once it is enqueued on the
  // runtime stream (later work there sees the result); it may wait on the host where data
  // cross to it (a staged transport, the non-finite verdict).
  virtual RunStats allreduce(void* data, size_t count, DType dtype,
                             const AllreduceOptions& options) = 0;
  // The same host by host (ops/hierarchical.h; DeviceSetup's levels): NCCL's own collectives
  // inside each host, `options` across hosts. Where some host cannot run NCCL among its ranks
  // (two on one GPU, CERAR_DEVICE_TRANSPORT=gloo, no NCCL), every rank of the job runs the
  // exact ring over all ranks instead (RunStats::flatFallback): the ranks agree on it.
  virtual RunStats allreduceByHost(void* data, size_t count, DType dtype,
                                   const AllreduceOptions& options);
  // An event after everything enqueued so far on the runtime stream.
  virtual DeviceEvent record() = 0;
};

class DeviceQueue;

// The runtime's DeviceOps behind its DeviceQueue, made on first use: by the first device tensor enqueued on this rank
// (its device), or by the coordinator when a joined rank takes part in a device collective
// (device -1: the factory's choice). A rank uses one device. Thread safety: any thread.
class DeviceSlot {
 public:
  DeviceSlot(DeviceOpsFactory factory, DeviceSetup setup);
  ~DeviceSlot();  // finishes the queued work
  bool available() const { return static_cast<bool>(factory_); }
  // The queue; throws Error when this build has no device support, the factory fails, or
  // this rank already uses another device.
  DeviceQueue& get(int device);
  // Returns once the queue (if made) has run all its work: no device work touches a tensor
  // after this (shutdown).
  void drain();

 private:
  DeviceOpsFactory factory_;
  DeviceSetup setup_;
  std::mutex mutex_;
  std::unique_ptr<DeviceQueue> queue_;
};

}  // namespace cerar
