#include "core/device/device.h"

#include "core/device/device_queue.h"

#include "common/error.h"

namespace cerar {

RunStats DeviceOps::allreduceByHost(void*, size_t, DType, const AllreduceOptions&) {
  throw Error("this device has no host-by-host all-reduce");
}

DeviceSlot::DeviceSlot(DeviceOpsFactory factory, DeviceSetup setup)
    : factory_(std::move(factory)), setup_(std::move(setup)) {}

DeviceSlot::~DeviceSlot() = default;

void DeviceSlot::drain() {
  DeviceQueue* queue;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue = queue_.get();
  }
  if (queue) queue->drain();
}

DeviceQueue& DeviceSlot::get(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int rank = setup_.transport ? setup_.transport->rank() : 0;
  if (!queue_) {
    CERAR_ENFORCE(factory_, "this build of cerar has no CUDA support: reduce host tensors (copy "
                  "them with .cpu()), or build with the CUDA toolkit and NCCL");
    std::unique_ptr<DeviceOps> ops = factory_(device, setup_);
    CERAR_ENFORCE(ops != nullptr, "rank ", rank, ": no CUDA device could be used");
    queue_ = std::make_unique<DeviceQueue>(std::move(ops));
  }
  // One device per rank, as one fusion buffer and one stream serve all of its tensors.
  CERAR_ENFORCE(device < 0 || device == queue_->device(), "rank ", rank, " uses cuda:",
                queue_->device(), " and got a tensor on cuda:", device,
                "; a rank reduces tensors of one device");
  return *queue_;
}

}  // namespace cerar
