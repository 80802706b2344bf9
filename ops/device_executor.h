// Runs any plan on device buffers: the host Executor's segment streaming with the CUDA codec.
#pragma once

#include <cstddef>

#include "ops/algorithms/plan.h"
#include "ops/codec/cuda/device_transport.h"
#include "ops/executor.h"

namespace cerar {

// The same rounds, segments, posting order and waits as ops/executor.cc, so every transport
// sees the same transfers and results are bit-identical to the host executor's. Kernels,
// sends and receives are ordered on transport.stream(); the host only waits where the
// transport contract requires (receive before use, send before the buffer is rewritten).
// Thread safety: one run at a time per executor; device buffers are kept between runs.
class DeviceExecutor {
 public:
  // Larger than the host default: each segment costs a kernel launch and a host wait.
  static constexpr size_t kDefaultSegmentBytes = 4 << 20;

  explicit DeviceExecutor(size_t segmentBytes = kDefaultSegmentBytes);
  ~DeviceExecutor();
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;

  // Runs `plan` in place on device memory `data` (plan.d elements of params.dtype), on the
  // device current to the calling thread. Work on other streams that writes `data` must be
  // complete (or ordered before transport.stream()) when run() is called. Returns once the
  // result is complete on the device (waited for with the transport's timeout).
  RunStats run(const Plan& plan, DeviceTransport& transport, void* data,
               const CodecParams& params);

 private:
  void reserve(size_t bytes);

  size_t segmentBytes_;
  size_t capacity_ = 0;  // bytes of each buffer below
  void* send_[2] = {nullptr, nullptr};
  void* recv_[2] = {nullptr, nullptr};
};

}  // namespace cerar
