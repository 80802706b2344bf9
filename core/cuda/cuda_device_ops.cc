#include "core/cuda/cuda_device_ops.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/device.h"
#include "ops/codec/cuda/codec_cuda.h"
#include "ops/codec/range.h"
#include "ops/codec/cuda/cuda_util.h"
#include "ops/device_executor.h"
#include "ops/collectives.h"
#include "ops/common/error.h"
#ifndef CERAR_NO_NCCL
#include "ops/transport/nccl.h"
#endif
#include "ops/transport/staged.h"

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

// The runtime's host transport, shared with the runtime (StagedTransport owns its inner one).
class SharedTransport : public Transport {
 public:
  explicit SharedTransport(std::shared_ptr<Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Duration timeout() const override { return inner_->timeout(); }
  void postSend(int peer, const void* data, size_t bytes) override {
    inner_->postSend(peer, data, bytes);
  }
  void postRecv(int peer, void* data, size_t bytes) override {
    inner_->postRecv(peer, data, bytes);
  }
  void waitSend(int peer) override { inner_->waitSend(peer); }
  void waitRecv(int peer) override { inner_->waitRecv(peer); }

 private:
  std::shared_ptr<Transport> inner_;
};

// Plans on device memory, for Communicator.
class DeviceRunner : public PlanRunner {
 public:
  ~DeviceRunner() override {
    if (scratch_) cudaFree(scratch_);
  }
  RunStats run(const Plan& plan, Transport& transport, void* data,
               const CodecParams& params) override {
    return executor_.run(plan, static_cast<DeviceTransport&>(transport), data, params);
  }
  bool hostMemory() const override { return false; }

  // A kernel on the transport's stream (which follows the packing), then one word back.
  bool beyondCerarRange(Transport& transport, const void* data, size_t count,
                        DType dtype) override {
    void* stream = static_cast<DeviceTransport&>(transport).stream();
    auto* flag = static_cast<unsigned*>(scratch(transport.size()));
    cuda::check(cudaMemsetAsync(flag, 0, sizeof(unsigned), static_cast<cudaStream_t>(stream)),
                "cudaMemsetAsync (range flag)");
    cuda::rangeTest(dtype, data, count, codec::rangeExponentLimit(dtype, transport.size()),
                    flag, stream);
    unsigned host = 0;
    toHost(transport, &host, flag, sizeof host);
    return host != 0;
  }

  // The device transport moves device memory only: the flags travel from a device buffer.
  bool anyRank(Transport& transport, bool mine) override {
    const int N = transport.size();
    auto stream = static_cast<cudaStream_t>(static_cast<DeviceTransport&>(transport).stream());
    auto* flags = static_cast<uint8_t*>(scratch(N));
    cuda::check(cudaMemsetAsync(flags, 0, N, stream), "cudaMemsetAsync (flags)");
    cuda::check(cudaMemsetAsync(flags + transport.rank(), mine ? 1 : 0, 1, stream),
                "cudaMemsetAsync (flag)");
    ringAllgather(transport, flags, std::vector<size_t>(N, 1));
    std::vector<uint8_t> host(N, 0);
    toHost(transport, host.data(), flags, N);
    return std::any_of(host.begin(), host.end(), [](uint8_t flag) { return flag != 0; });
  }

 private:
  // At least max(bytes, one word) of device memory, kept.
  void* scratch(size_t bytes) {
    bytes = std::max(bytes, sizeof(unsigned));
    if (bytes > scratchBytes_) {
      if (scratch_) cudaFree(scratch_);
      scratch_ = nullptr;
      scratchBytes_ = 0;
      cuda::check(cudaMalloc(&scratch_, bytes), "cudaMalloc (flags)");
      scratchBytes_ = bytes;
    }
    return scratch_;
  }
  void toHost(Transport& transport, void* host, const void* device, size_t bytes) {
    void* stream = static_cast<DeviceTransport&>(transport).stream();
    cuda::check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost,
                                static_cast<cudaStream_t>(stream)),
                "cudaMemcpyAsync (flags)");
    if (!cuda::waitStream(stream, transport.timeout()))
      throw TimeoutError(detail::concat("rank ", transport.rank(),
                                        ": the device did not finish the range check"),
                         transport.rank());
  }

  DeviceExecutor executor_;
  void* scratch_ = nullptr;
  size_t scratchBytes_ = 0;
};

DeviceEvent newEvent() {
  cudaEvent_t event = nullptr;
  cuda::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  return DeviceEvent(static_cast<void*>(event),
                     [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
}

// What each rank says before the ranks pick the device transport together.
struct TransportVote {
  static constexpr size_t kBytes = 128;
  char want = 'a';  // 'a'uto, 'n'ccl, 'g'loo
  std::string gpu;  // host name and PCI bus id: two ranks on one GPU cannot use NCCL
};

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
    communicator_.reset();  // the device transport and executor buffers first
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

  bool wait(const DeviceEvent& event, std::chrono::milliseconds timeout) override {
    return cuda::waitEvent(event.get(), timeout);
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
    // The executor works on the transport's stream: order it after the packing on ours.
    DeviceEvent packed = record();
    cuda::check(cudaStreamWaitEvent(static_cast<cudaStream_t>(transport_->stream()),
                                    static_cast<cudaEvent_t>(packed.get()), 0),
                "cudaStreamWaitEvent");
    // Returns once the result is complete on the device, so later work on ours sees it.
    return communicator_->allreduce(data, count, dtype, options);
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
    Transport& host = *setup_.transport;
    const bool nccl = chooseNccl(host);
    if (nccl) {
#ifdef CERAR_NO_NCCL
      throw Error("this build has no NCCL (CERAR_DEVICE_TRANSPORT=gloo)");
#else
      NcclId id{};
      if (host.rank() == 0) id = newNcclId();
      chainBroadcast(host, id.data(), id.size(), 0);
      NcclOptions options;
      options.timeout = setup_.timeout;
      transport_ = connectNcclWithId(id, host.rank(), host.size(), device_, options);
#endif
    } else {
      transport_ = std::make_shared<StagedTransport>(
          std::make_unique<SharedTransport>(setup_.transport), device_);
    }
    communicator_ = std::make_unique<Communicator>(transport_, std::make_unique<DeviceRunner>());
  }

  bool chooseNccl(Transport& host) {
    TransportVote mine;
    mine.want = setup_.transportKind.empty() ? 'a' : setup_.transportKind[0];
#ifdef CERAR_NO_NCCL
    if (mine.want == 'a') mine.want = 'g';
#endif
    char bus[64] = {};
    cuda::check(cudaDeviceGetPCIBusId(bus, sizeof bus, device_), "cudaDeviceGetPCIBusId");
    char name[64] = {};
    gethostname(name, sizeof name - 1);
    mine.gpu = std::string(name) + "/" + bus;
    const size_t B = TransportVote::kBytes;
    std::vector<char> all(B * host.size(), 0);
    char* slot = all.data() + B * host.rank();
    slot[0] = mine.want;
    std::memcpy(slot + 1, mine.gpu.data(), std::min(mine.gpu.size(), B - 2));
    ringAllgather(host, all.data(), std::vector<size_t>(host.size(), B));
    bool anyGloo = false, anyNccl = false, shared = false;
    std::vector<std::string> gpus;
    for (int r = 0; r < host.size(); ++r) {
      const char* at = all.data() + B * r;
      anyGloo |= at[0] == 'g';
      anyNccl |= at[0] == 'n';
      std::string gpu(at + 1, strnlen(at + 1, B - 1));
      shared |= std::find(gpus.begin(), gpus.end(), gpu) != gpus.end();
      gpus.push_back(gpu);
    }
    const bool nccl = !anyGloo && !shared;
    CERAR_ENFORCE(nccl || !anyNccl, "rank ", host.rank(), ": CERAR_DEVICE_TRANSPORT=nccl was "
                  "asked for, but ", anyGloo ? "another rank asked for gloo"
                                             : "two ranks share a GPU, which NCCL refuses");
    return nccl;
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
