#include "core/device/cuda/cuda_device_ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "core/device/device.h"
#include "ops/codec/cuda/codec_cuda.h"
#include "ops/codec/cuda/cuda_util.h"
#include "common/error.h"
#include "ops/device_executor.h"
#include "ops/hierarchical.h"
#include "ops/transport/device_select.h"
#ifndef CERAR_NO_NCCL
#include "ops/transport/nccl.h"
#endif

namespace cerar {
namespace {

// Makes `device` current on this thread for the scope, then restores the previous one (user
// threads call ready() and must keep their own current device).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cuda::check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) cuda::check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

DeviceEvent newEvent() {
  cudaEvent_t event = nullptr;
  cuda::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  return DeviceEvent(static_cast<void*>(event),
                     [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
}

// Later work on `later` waits for the work enqueued on `earlier` so far (no host wait).
void follow(void* earlier, void* later) {
  if (earlier == later) return;
  DeviceEvent event = newEvent();  // freed once reached: CUDA keeps a recorded event alive
  cuda::check(cudaEventRecord(static_cast<cudaEvent_t>(event.get()),
                              static_cast<cudaStream_t>(earlier)), "cudaEventRecord");
  cuda::check(cudaStreamWaitEvent(static_cast<cudaStream_t>(later),
                                  static_cast<cudaEvent_t>(event.get()), 0),
              "cudaStreamWaitEvent");
}

#ifndef CERAR_NO_NCCL
// A host's own level on NCCL's collectives among its ranks (its intra-node paths), ordered on
// the step across hosts' stream: each waits there for what came before, and what comes after
// waits for it. The figures are those of NCCL's ring.
class NcclHostLevel final : public HostLevel {
 public:
  NcclHostLevel(std::shared_ptr<NcclTransport> links, void* across)
      : links_(std::move(links)), across_(across) {}
  int rank() const override { return links_->rank(); }
  int size() const override { return links_->size(); }
  RunStats reduceScatter(void* data, const std::vector<size_t>& slices, DType dtype,
                         ReduceOp op) override {
    follow(across_, links_->stream());
    links_->reduceScatter(data, slices, dtype, op);
    follow(links_->stream(), across_);
    return ringLevelFigures(slices, rank(), dtype);
  }
  RunStats allGather(void* data, const std::vector<size_t>& slices, DType dtype) override {
    follow(across_, links_->stream());
    links_->allGather(data, slices, dtype);
    follow(links_->stream(), across_);
    return ringLevelFigures(slices, rank(), dtype);
  }

 private:
  std::shared_ptr<NcclTransport> links_;
  void* across_;
};
#endif

class CudaDeviceOps final : public DeviceOps {
 public:
  CudaDeviceOps(int device, const DeviceSetup& setup) : device_(device), setup_(setup) {
    DeviceScope scope(device_);
    cudaStream_t stream = nullptr;
    cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    stream_ = stream;
  }
  ~CudaDeviceOps() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream());
    communicator_.reset();  // the device transports and executor buffers first
    hierarchy_.reset();
    std::atomic_store(&transport_, std::shared_ptr<DeviceTransport>());
    std::atomic_store(&across_, std::shared_ptr<DeviceTransport>());
    if (buffer_) cudaFree(buffer_);
    if (descriptors_) cudaFree(descriptors_);
    if (staging_) cudaFreeHost(staging_);
    cudaStreamDestroy(stream());
  }

  int device() const override { return device_; }

  DeviceEvent ready(void* stream) override {
    DeviceScope scope(device_);
    DeviceEvent event = newEvent();
    cuda::check(cudaEventRecord(static_cast<cudaEvent_t>(event.get()),
                                static_cast<cudaStream_t>(stream)),
                "cudaEventRecord (a tensor's stream)");
    return event;
  }

  // Any thread (the finalizer's). Once the device transport exists, through it: NCCL's
  // asynchronous errors and stuck peers surface here as its typed errors.
  bool wait(const DeviceEvent& event, std::chrono::milliseconds timeout) override {
    if (!event) return true;
    std::shared_ptr<DeviceTransport> transport = std::atomic_load(&transport_);
    if (!transport) transport = std::atomic_load(&across_);
    return transport ? transport->waitEvent(event.get(), timeout)
                     : cuda::waitEvent(event.get(), timeout);
  }

  void after(const DeviceEvent& event) override {
    if (!event) return;
    enter();
    cuda::check(cudaStreamWaitEvent(stream(), static_cast<cudaEvent_t>(event.get()), 0),
                "cudaStreamWaitEvent");
  }

  std::byte* fusionBuffer(size_t bytes) override {
    enter();
    if (bytes > capacity_) {
      drain("growing the fusion buffer");  // earlier work may still use the old one
      if (buffer_) cudaFree(buffer_);
      buffer_ = nullptr;
      capacity_ = 0;
      cuda::check(cudaMalloc(&buffer_, bytes), "cudaMalloc (fusion buffer)");
      capacity_ = bytes;
    }
    return static_cast<std::byte*>(buffer_);
  }

  void copy(const std::vector<DeviceCopy>& copies) override {
    if (copies.empty()) return;
    enter();
    if (copies.size() == 1) {
      const DeviceCopy& c = copies.front();
      cuda::check(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToDevice, stream()),
                  "cudaMemcpyAsync (fusion)");
      return;
    }
    // Descriptors go up through pinned memory; the previous upload must be done before it is
    // rewritten (the kernel that read the device copy is ordered on the stream already).
    const size_t bytes = copies.size() * sizeof(cuda::CopySegment);
    if (!cuda::waitEvent(descriptorsSent_.get(), setup_.timeout))
      throw TimeoutError(detail::concat("rank ", rank(), ": device copy descriptors stuck"),
                         rank());
    if (bytes > descriptorCapacity_) {
      drain("growing the copy descriptors");
      if (staging_) cudaFreeHost(staging_);
      if (descriptors_) cudaFree(descriptors_);
      staging_ = descriptors_ = nullptr;
      descriptorCapacity_ = 0;
      cuda::check(cudaMallocHost(&staging_, bytes), "cudaMallocHost (copy descriptors)");
      cuda::check(cudaMalloc(&descriptors_, bytes), "cudaMalloc (copy descriptors)");
      descriptorCapacity_ = bytes;
    }
    auto* host = static_cast<cuda::CopySegment*>(staging_);
    size_t longest = 0;
    for (size_t i = 0; i < copies.size(); ++i) {
      host[i] = cuda::CopySegment{copies[i].src, copies[i].dst, copies[i].bytes};
      longest = std::max(longest, copies[i].bytes);
    }
    cuda::check(cudaMemcpyAsync(descriptors_, staging_, bytes, cudaMemcpyHostToDevice, stream()),
                "cudaMemcpyAsync (copy descriptors)");
    if (!descriptorsSent_) descriptorsSent_ = newEvent();
    cuda::check(cudaEventRecord(static_cast<cudaEvent_t>(descriptorsSent_.get()), stream()),
                "cudaEventRecord");
    cuda::batchedCopy(static_cast<const cuda::CopySegment*>(descriptors_),
                      static_cast<int>(copies.size()), longest, stream_);
  }

  void scale(DType dtype, void* data, size_t n, double factor) override {
    enter();
    cuda::scale(dtype, data, n, factor, stream_);
  }
  void fillIdentity(DType dtype, ReduceOp op, void* data, size_t n) override {
    enter();
    cuda::fillIdentity(dtype, op, data, n, stream_);
  }

  void download(void* host, const void* device, size_t bytes) override {
    enter();
    cuda::check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream()),
                "cudaMemcpyAsync (to host)");
    drain("a copy to the host");
  }
  void upload(void* device, const void* host, size_t bytes) override {
    enter();
    cuda::check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream()),
                "cudaMemcpyAsync (to the device)");
    drain("a copy to the device");  // the host bytes may be reused on return
  }

  RunStats allreduce(void* data, size_t count, DType dtype,
                     const AllreduceOptions& options) override {
    enter();
    if (!communicator_) connect();
    // The executor works on the transport's stream: order it after the packing on ours, and
    // later work on ours after the run (enqueued, not waited for: stream-ordered rounds).
    follow(stream_, transport_->stream());
    const RunStats run = communicator_->allreduce(data, count, dtype, options);
    follow(transport_->stream(), stream_);
    return run;
  }

  RunStats allreduceByHost(void* data, size_t count, DType dtype,
                           const AllreduceOptions& options) override {
    enter();
    if (!levelsTried_) connectLevels();
    if (!hierarchy_) {  // some host has no NCCL among its ranks: every rank runs this
      AllreduceOptions flat = options;
      flat.algorithm = Algorithm::kRing;
      flat.components = 0;
      RunStats run = allreduce(data, count, dtype, flat);
      run.flatFallback = true;
      return run;
    }
    follow(stream_, across_->stream());
    const RunStats run = hierarchy_->allreduce(data, count, dtype, options);
    follow(across_->stream(), stream_);
    return run;
  }

  DeviceEvent record() override {
    enter();
    DeviceEvent event = newEvent();
    cuda::check(cudaEventRecord(static_cast<cudaEvent_t>(event.get()), stream()),
                "cudaEventRecord");
    return event;
  }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_); }
  int rank() const { return setup_.transport->rank(); }
  // The coordinator thread works on this device.
  void enter() { cuda::check(cudaSetDevice(device_), "cudaSetDevice"); }
  void drain(const char* what) {
    if (!cuda::waitStream(stream_, setup_.timeout))
      throw TimeoutError(detail::concat("rank ", rank(), ": the device did not finish ", what,
                                        " within ", setup_.timeout.count(), " ms"), rank());
  }

  // Every rank at once (the first device all-reduce is dispatched everywhere in one order).
  void connect() {
    DeviceTransportOptions options;
    options.wish = setup_.transportKind.empty() ? "auto" : setup_.transportKind;
    options.timeout = setup_.timeout;
    std::shared_ptr<DeviceTransport> transport =
        connectDeviceTransport(setup_.transport, device_, options);
    communicator_ = std::make_unique<Communicator>(
        transport, std::make_unique<DevicePlanRunner>(transport,
                                                      DeviceExecutor::Completion::kEnqueue));
    std::atomic_store(&transport_, std::move(transport));
  }

  // A layered job's levels, every rank at once (the first host-by-host unit is dispatched
  // everywhere in one order). A host's own level needs NCCL among its ranks, on every host.
  void connectLevels() {
    levelsTried_ = true;
    if (!setup_.local || !setup_.cross) return;  // the same on every rank: no channels
    DeviceTransportOptions options;
    options.timeout = setup_.timeout;
    bool usable = false;
#ifndef CERAR_NO_NCCL
    std::shared_ptr<NcclTransport> local;
    if (setup_.transportKind != "gloo") {
      local = std::dynamic_pointer_cast<NcclTransport>(
          connectDeviceTransport(setup_.local, device_, options));
      usable = local != nullptr;
    }
#endif
    if (!everyRankAgrees(usable, setup_.local, setup_.cross)) return;
#ifndef CERAR_NO_NCCL
    options.wish = setup_.transportKind.empty() ? "auto" : setup_.transportKind;
    std::shared_ptr<DeviceTransport> across = connectDeviceTransport(setup_.cross, device_,
                                                                     options);
    hierarchy_ = std::make_unique<HierarchicalAllreduce>(
        std::make_shared<NcclHostLevel>(std::move(local), across->stream()),
        std::make_unique<Communicator>(
            across, std::make_unique<DevicePlanRunner>(across,
                                                       DeviceExecutor::Completion::kEnqueue)));
    std::atomic_store(&across_, std::move(across));
#endif
  }

  int device_;
  DeviceSetup setup_;
  void* stream_ = nullptr;
  void* buffer_ = nullptr;
  size_t capacity_ = 0;
  void* staging_ = nullptr;      // pinned copy descriptors
  void* descriptors_ = nullptr;  // their device copy
  size_t descriptorCapacity_ = 0;
  DeviceEvent descriptorsSent_;
  std::shared_ptr<DeviceTransport> transport_;
  std::unique_ptr<Communicator> communicator_;
  bool levelsTried_ = false;
  std::shared_ptr<DeviceTransport> across_;  // the step across hosts' transport
  std::unique_ptr<HierarchicalAllreduce> hierarchy_;
};

}  // namespace

DeviceOpsFactory cudaDeviceOps() {
  return [](int device, const DeviceSetup& setup) -> std::unique_ptr<DeviceOps> {
    std::string why;
    const int count = cuda::deviceCount(&why);
    CERAR_ENFORCE(count > 0, "no CUDA device: ", why);
    if (device < 0) cuda::check(cudaGetDevice(&device), "cudaGetDevice");
    CERAR_ENFORCE(device < count, "cuda:", device, " does not exist (", count, " devices)");
    return std::make_unique<CudaDeviceOps>(device, setup);
  };
}

}  // namespace cerar
