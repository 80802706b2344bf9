#include "ops/device_executor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/codec/cuda/codec_cuda.h"
#include "ops/codec/range.h"
#include "ops/collectives.h"
#include "ops/codec/cuda/cuda_util.h"
#include "common/error.h"
#include "ops/plan_run.h"

namespace cerar {
namespace {

// The CUDA codec on the transport's stream, bound to one all-reduce's parameters.
class CudaCodec : public SegmentCodec {
 public:
  CudaCodec(const CodecParams& params, void* stream) : p_(params), stream_(stream) {}
  void accumulate(const void* y, const void* g, void* msg, size_t n) override {
    cuda::accumulate(p_.dtype, p_.op, y, g, msg, n, stream_);
  }
  void finishFirst(const void* y, void* out, size_t n) override {
    cuda::finishFirst(p_.dtype, p_.op, y, out, n, stream_);
  }
  void finishDecode(const void* y, const void* previous, void* out, size_t n) override {
    cuda::finishDecode(p_.dtype, p_.eps, y, previous, out, n, stream_);
  }
  void storeAndEncode(const void* y, const void* g, size_t gLength, void* store, void* msg,
                      size_t n) override {
    cuda::storeAndEncode(p_.dtype, p_.eps, y, g, gLength, store, msg, n, stream_);
  }
  void store(const void* y, void* out, size_t n) override {
    cuda::store(p_.dtype, y, out, n, stream_);
  }

 private:
  const CodecParams& p_;
  void* stream_;
};

}  // namespace

DeviceExecutor::DeviceExecutor(size_t segmentBytes, Completion completion)
    : segmentBytes_(segmentBytes), completion_(completion) {
  CERAR_ENFORCE(segmentBytes > 0, "segment size must be positive");
}

DeviceExecutor::~DeviceExecutor() {
  for (void* buffer : {send_[0], send_[1], recv_[0], recv_[1]})
    if (buffer) cudaFree(buffer);
}

void DeviceExecutor::reserve(size_t bytes) {
  if (bytes <= capacity_) return;
  for (void** buffer : {&send_[0], &send_[1], &recv_[0], &recv_[1]}) {
    if (*buffer) cudaFree(*buffer);
    *buffer = nullptr;
  }
  capacity_ = 0;
  for (void** buffer : {&send_[0], &send_[1], &recv_[0], &recv_[1]})
    cuda::check(cudaMalloc(buffer, bytes), "cudaMalloc (executor buffers)");
  capacity_ = bytes;
}

RunStats DeviceExecutor::run(const Plan& plan, DeviceTransport& transport, void* data,
                             const CodecParams& params) {
  CudaCodec codec(params, transport.stream());
  auto prepare = [&](size_t bytes) {
    // Reuse by this run is ordered after the last one on the stream; freeing buffers that
    // queued work may still use is not: let the stream drain before growing them.
    if (bytes > capacity_ && !cuda::waitStream(transport.stream(), transport.timeout()))
      throw TimeoutError(detail::concat("rank ", plan.rank, ": device stream busy before run"),
                         plan.rank);
    reserve(bytes);
    return RunBuffers{{send_[0], send_[1]}, {recv_[0], recv_[1]}};
  };
  auto finish = [&] {
    if (!cuda::waitStream(transport.stream(), transport.timeout()))
      throw TimeoutError(detail::concat("rank ", plan.rank, ": device work not done after ",
                                        transport.timeout().count(), " ms"), plan.rank);
  };
  return runPlan(plan, transport, data, dtypeSize(params.dtype), Pacing{segmentBytes_, 0}, codec,
                 prepare,
                 completion_ == Completion::kWait ? std::function<void()>(finish) : nullptr);
}

DevicePlanRunner::DevicePlanRunner(std::shared_ptr<DeviceTransport> transport,
                                   DeviceExecutor::Completion completion)
    : transport_(std::move(transport)),
      executor_(DeviceExecutor::kDefaultSegmentBytes, completion) {
  CERAR_ENFORCE(transport_ != nullptr, "device plan runner without a transport");
}

DevicePlanRunner::~DevicePlanRunner() {
  if (scratch_) cudaFree(scratch_);
}

DeviceTransport& DevicePlanRunner::bound(const Transport& transport) const {
  CERAR_ENFORCE(&transport == transport_.get(), "rank ", transport.rank(),
                ": a device plan runner ran on a transport it was not built for");
  return *transport_;
}

RunStats DevicePlanRunner::run(const Plan& plan, Transport& transport, void* data,
                               const CodecParams& params) {
  return executor_.run(plan, bound(transport), data, params);
}

// A kernel on the transport's stream (which follows the packing), then one word back.
bool DevicePlanRunner::beyondCerarRange(Transport& transport, const void* data, size_t count,
                                        DType dtype) {
  DeviceTransport& device = bound(transport);
  auto* flag = static_cast<unsigned*>(scratch(device.size()));
  cuda::check(cudaMemsetAsync(flag, 0, sizeof(unsigned),
                              static_cast<cudaStream_t>(device.stream())),
              "cudaMemsetAsync (range flag)");
  cuda::rangeTest(dtype, data, count, codec::rangeExponentLimit(dtype, device.size()), flag,
                  device.stream());
  unsigned host = 0;
  toHost(&host, flag, sizeof host);
  return host != 0;
}

// The device transport moves device memory only: the flags travel from a device buffer.
bool DevicePlanRunner::anyRank(Transport& transport, bool mine) {
  DeviceTransport& device = bound(transport);
  const int N = device.size();
  auto stream = static_cast<cudaStream_t>(device.stream());
  auto* flags = static_cast<uint8_t*>(scratch(N));
  cuda::check(cudaMemsetAsync(flags, 0, N, stream), "cudaMemsetAsync (flags)");
  cuda::check(cudaMemsetAsync(flags + device.rank(), mine ? 1 : 0, 1, stream),
              "cudaMemsetAsync (flag)");
  ringAllgather(device, flags, std::vector<size_t>(N, 1));
  std::vector<uint8_t> host(N, 0);
  toHost(host.data(), flags, N);
  return std::any_of(host.begin(), host.end(), [](uint8_t flag) { return flag != 0; });
}

void* DevicePlanRunner::scratch(size_t bytes) {
  bytes = std::max(bytes, sizeof(unsigned));
  if (bytes > scratchBytes_) {
    // Earlier runs' flags may still be in use on the stream.
    if (scratch_ && !cuda::waitStream(transport_->stream(), transport_->timeout()))
      throw TimeoutError(detail::concat("rank ", transport_->rank(),
                                        ": device stream busy before a flag exchange"),
                         transport_->rank());
    if (scratch_) cudaFree(scratch_);
    scratch_ = nullptr;
    scratchBytes_ = 0;
    cuda::check(cudaMalloc(&scratch_, bytes), "cudaMalloc (flags)");
    scratchBytes_ = bytes;
  }
  return scratch_;
}

// Through an event, waited for by the transport: a stuck NCCL peer fails it with the
// transport's own typed error instead of hanging in a stream wait.
void DevicePlanRunner::toHost(void* host, const void* device, size_t bytes) {
  auto stream = static_cast<cudaStream_t>(transport_->stream());
  cuda::check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync (flags)");
  cudaEvent_t event = nullptr;
  cuda::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  std::unique_ptr<void, void (*)(void*)> owned(
      event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  cuda::check(cudaEventRecord(event, stream), "cudaEventRecord (flags)");
  if (!transport_->waitEvent(event, transport_->timeout()))
    throw TimeoutError(detail::concat("rank ", transport_->rank(),
                                      ": the device did not finish the range check"),
                       transport_->rank());
}

}  // namespace cerar
