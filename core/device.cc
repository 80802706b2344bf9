#include "core/device.h"

#include "ops/common/error.h"

namespace cerar {

DeviceSlot::DeviceSlot(DeviceOpsFactory factory, DeviceSetup setup)
    : factory_(std::move(factory)), setup_(std::move(setup)) {}

DeviceOps& DeviceSlot::get(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int rank = setup_.transport ? setup_.transport->rank() : 0;
  if (!ops_) {
    CERAR_ENFORCE(factory_, "this build of cerar has no CUDA support: reduce host tensors (copy "
                  "them with .cpu()), or build with the CUDA toolkit and NCCL");
    ops_ = factory_(device, setup_);
    CERAR_ENFORCE(ops_ != nullptr, "rank ", rank, ": no CUDA device could be used");
  }
  // One device per rank, as one fusion buffer and one stream serve all of its tensors.
  CERAR_ENFORCE(device < 0 || device == ops_->device(), "rank ", rank, " uses cuda:",
                ops_->device(), " and got a tensor on cuda:", device,
                "; a rank reduces tensors of one device");
  return *ops_;
}

}  // namespace cerar
