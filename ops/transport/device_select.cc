#include "ops/transport/device_select.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/codec/cuda/cuda_util.h"
#include "ops/collectives.h"
#include "common/error.h"
#ifndef CERAR_NO_NCCL
#include "ops/transport/nccl.h"
#endif
#include "ops/transport/staged.h"

namespace cerar {
namespace {

// Each rank's GPU, "host/PCI bus id", in a fixed-size slot of one allgather.
constexpr size_t kSlotBytes = 128;

std::string thisGpu(int device) {
  char bus[64] = {};
  cuda::check(cudaDeviceGetPCIBusId(bus, sizeof bus, device), "cudaDeviceGetPCIBusId");
  char name[64] = {};
  gethostname(name, sizeof name - 1);
  return std::string(name) + "/" + bus;
}

// Whether two ranks of `host` share a GPU.
bool gpusShared(Transport& host, int device) {
  const std::string mine = thisGpu(device);
  std::vector<char> all(kSlotBytes * host.size(), 0);
  std::memcpy(all.data() + kSlotBytes * host.rank(), mine.data(),
              std::min(mine.size(), kSlotBytes - 1));
  ringAllgather(host, all.data(), std::vector<size_t>(host.size(), kSlotBytes));
  std::vector<std::string> gpus;
  for (int r = 0; r < host.size(); ++r) {
    const char* at = all.data() + kSlotBytes * r;
    gpus.emplace_back(at, strnlen(at, kSlotBytes));
  }
  std::sort(gpus.begin(), gpus.end());
  return std::adjacent_find(gpus.begin(), gpus.end()) != gpus.end();
}

}  // namespace

std::shared_ptr<DeviceTransport> connectDeviceTransport(std::shared_ptr<Transport> host,
                                                        int device,
                                                        const DeviceTransportOptions& options) {
  CERAR_ENFORCE(host != nullptr, "device transport without host links");
  const std::string& wish = options.wish;
  CERAR_ENFORCE(wish == "auto" || wish == "nccl" || wish == "gloo", "rank ", host->rank(),
                ": unknown device transport '", wish, "' (auto, nccl or gloo)");
  bool nccl = false;
  if (wish != "gloo") {
    // The wish is agreed, so every rank takes this branch and the allgather pairs up.
    const bool shared = gpusShared(*host, device);
#ifdef CERAR_NO_NCCL
    CERAR_ENFORCE(wish != "nccl", "rank ", host->rank(),
                  ": CERAR_DEVICE_TRANSPORT=nccl, but this build has no NCCL");
#else
    nccl = !shared;
#endif
    CERAR_ENFORCE(nccl || wish != "nccl", "rank ", host->rank(),
                  ": CERAR_DEVICE_TRANSPORT=nccl was asked for, but two ranks share a GPU, "
                  "which NCCL refuses");
  }
#ifndef CERAR_NO_NCCL
  if (nccl) {
    NcclId id{};
    if (host->rank() == 0) id = newNcclId();
    chainBroadcast(*host, id.data(), id.size(), 0);
    NcclOptions nccl;
    nccl.timeout = options.timeout;
    nccl.streamOrdered = options.streamOrdered;
    return connectNcclWithId(id, host->rank(), host->size(), device, nccl);
  }
#endif
  return std::make_shared<StagedTransport>(std::move(host), device);
}

}  // namespace cerar
