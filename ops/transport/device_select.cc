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
#include "ops/transport/nccl_library.h"
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

// What every rank of `host` told the others: its GPU and whether NCCL loads there.
struct Peers {
  bool gpuShared = false;  // two ranks on one GPU, which NCCL refuses
  int withoutNccl = -1;    // the first rank where NCCL does not load, or -1
  std::string why;         // why NCCL does not load on this rank (the others' stay there)
};

// One allgather of fixed slots: a flag byte (NCCL loads here) and "host/PCI bus id".
Peers askPeers(Transport& host, int device) {
  Peers peers;
  const std::string mine = thisGpu(device);
  bool ncclHere = false;
#ifndef CERAR_NO_NCCL
  ncclHere = tryNcclLibrary(&peers.why) != nullptr;
#else
  peers.why = "this build has no NCCL";
#endif
  std::vector<char> all(kSlotBytes * host.size(), 0);
  char* slot = all.data() + kSlotBytes * host.rank();
  slot[0] = ncclHere ? 1 : 0;
  std::memcpy(slot + 1, mine.data(), std::min(mine.size(), kSlotBytes - 2));
  ringAllgather(host, all.data(), std::vector<size_t>(host.size(), kSlotBytes));
  std::vector<std::string> gpus;
  for (int r = 0; r < host.size(); ++r) {
    const char* at = all.data() + kSlotBytes * r;
    if (!at[0] && peers.withoutNccl < 0) peers.withoutNccl = r;
    gpus.emplace_back(at + 1, strnlen(at + 1, kSlotBytes - 1));
  }
  std::sort(gpus.begin(), gpus.end());
  peers.gpuShared = std::adjacent_find(gpus.begin(), gpus.end()) != gpus.end();
  return peers;
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
    // The wish is agreed, so every rank takes this branch and the allgather pairs up; what it
    // gathers is the same on every rank, so every rank decides alike.
    const Peers peers = askPeers(*host, device);
    CERAR_CHECK_ARGUMENT(peers.withoutNccl < 0 || wish != "nccl", "rank ", host->rank(),
                         ": CERAR_DEVICE_TRANSPORT=nccl was asked for, but NCCL does not load "
                         "on rank ", peers.withoutNccl,
                         peers.why.empty() ? std::string() : " (here: " + peers.why + ")");
    CERAR_ENFORCE(!peers.gpuShared || wish != "nccl", "rank ", host->rank(),
                  ": CERAR_DEVICE_TRANSPORT=nccl was asked for, but two ranks share a GPU, "
                  "which NCCL refuses");
    // auto: NCCL where every rank has it and no GPU is shared, else the staged Gloo links.
    nccl = peers.withoutNccl < 0 && !peers.gpuShared;
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
