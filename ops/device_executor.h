// Runs any plan on device buffers: the host Executor's segment streaming with the CUDA codec;
// and the Communicator's PlanRunner for device memory, bound to its device transport.
#pragma once

#include <cstddef>
#include <memory>

#include "ops/algorithms/plan.h"
#include "ops/transport/device_transport.h"
#include "ops/executor.h"

namespace cerar {

// The same rounds, segments, posting order and waits as the host Executor (both run
// ops/plan_run.h's runPlan), so every transport sees the same transfers and results are
// bit-identical to the host executor's. Kernels, sends and receives are ordered on
// transport.stream(); the host only waits where the transport contract requires (receive
// before use, send before the buffer is rewritten), and over a stream-ordered transport (NCCL)
// not at all.
// Thread safety: one run at a time per executor; device buffers are kept between runs (their
// reuse by the next run is ordered on the stream; only growing them waits for it).
class DeviceExecutor {
 public:
  // Larger than the host default: each segment costs a kernel launch and a host wait.
  static constexpr size_t kDefaultSegmentBytes = 4 << 20;
  // What run() returns after: the result complete on the device (kWait), or the run enqueued
  // on transport.stream(), which later work there follows (kEnqueue; the caller observes
  // completion, e.g. DeviceTransport::waitEvent on an event recorded after it).
  enum class Completion { kWait, kEnqueue };

  explicit DeviceExecutor(size_t segmentBytes = kDefaultSegmentBytes,
                          Completion completion = Completion::kWait);
  ~DeviceExecutor();
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;

  // Runs `plan` in place on device memory `data` (plan.d elements of params.dtype), on the
  // device current to the calling thread. Work on other streams that writes `data` must be
  // complete (or ordered before transport.stream()) when run() is called. Returns as
  // Completion says (kWait: waited for with the transport's timeout).
  RunStats run(const Plan& plan, DeviceTransport& transport, void* data,
               const CodecParams& params);

 private:
  void reserve(size_t bytes);

  size_t segmentBytes_;
  Completion completion_;
  size_t capacity_ = 0;  // bytes of each buffer below
  void* send_[2] = {nullptr, nullptr};
  void* recv_[2] = {nullptr, nullptr};
};

// Plans on device memory over one device transport, for Communicator: built with the
// transport it runs on (the communicator's), so no call needs to guess its type. The
// non-finite test is a kernel on the transport's stream and the verdict one flag per rank
// gathered over it: the only host waits of a stream-ordered run.
class DevicePlanRunner : public PlanRunner {
 public:
  explicit DevicePlanRunner(std::shared_ptr<DeviceTransport> transport,
                            DeviceExecutor::Completion completion);
  ~DevicePlanRunner() override;
  RunStats run(const Plan& plan, Transport& transport, void* data,
               const CodecParams& params) override;
  bool hostMemory() const override { return false; }
  bool beyondCerarRange(Transport& transport, const void* data, size_t count,
                        DType dtype) override;
  bool anyRank(Transport& transport, bool mine) override;

 private:
  DeviceTransport& bound(const Transport& transport) const;
  void* scratch(size_t bytes);  // at least max(bytes, one word) of device memory, kept
  void toHost(void* host, const void* device, size_t bytes);

  std::shared_ptr<DeviceTransport> transport_;
  DeviceExecutor executor_;
  void* scratch_ = nullptr;
  size_t scratchBytes_ = 0;
};

}  // namespace cerar
