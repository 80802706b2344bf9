#include "ops/codec/cuda/device_executor.h"

#include <cuda_runtime.h>

#include "ops/codec/cuda/codec_cuda.h"
#include "ops/codec/cuda/cuda_util.h"
#include "ops/common/error.h"
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

DeviceExecutor::DeviceExecutor(size_t segmentBytes) : segmentBytes_(segmentBytes) {
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
    // Buffers are reused across runs, possibly by work still queued: let the stream drain.
    if (!cuda::waitStream(transport.stream(), transport.timeout()))
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
  return runPlan(plan, transport, data, dtypeSize(params.dtype), segmentBytes_, codec, prepare,
                 finish);
}

}  // namespace cerar
