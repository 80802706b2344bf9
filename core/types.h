// The runtime's vocabulary, shared by its public API (core/runtime.h) and its parts: the
// reduction op, a tensor view, the completion callback and the device factory. A leaf: the
// parts include it instead of the whole API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace cerar {

class Transport;
class DeviceOps;
struct DeviceSetup;

// Makes the device side of a runtime for CUDA device `device` (-1: its own choice); set by
// builds with CUDA (core/device/cuda/cuda_device_ops.h) and by tests. See core/device/device.h.
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

}  // namespace cerar
