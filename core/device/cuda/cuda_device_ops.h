// The runtime's device side on CUDA (core/device/device.h): a stream and a fusion buffer per rank,
// the codec kernels, and the all-reduce over NCCL P2P or over the runtime's Gloo links staged
// through pinned host memory.
#pragma once

#include "core/types.h"

namespace cerar {

// For RuntimeConfig::deviceOps. The made DeviceOps uses the tensor's device (-1: the calling
// thread's current device). Its transport is chosen at the first device all-reduce, by every
// rank together (RuntimeConfig::deviceTransport): with "auto", NCCL when no two ranks share a
// GPU and every rank allows it, else Gloo staging.
DeviceOpsFactory cudaDeviceOps();

}  // namespace cerar
