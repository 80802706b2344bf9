// The device transport of a job: NCCL P2P, or the host links staged through pinned memory,
// chosen by every rank together.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ops/transport/device_transport.h"

namespace cerar {

struct DeviceTransportOptions {
  // The job's agreed wish (CERAR_DEVICE_TRANSPORT, part of the agreed job configuration):
  // "auto", "nccl" or "gloo".
  std::string wish = "auto";
  std::chrono::milliseconds timeout{60000};
  // NCCL's waits only order the stream (NcclOptions::streamOrdered).
  bool streamOrdered = true;
};

// Collective over `host` (every rank calls it, in the same place of its transfers). The ranks
// share their GPUs (host name and PCI bus id): two ranks on one GPU cannot use NCCL ("duplicate
// GPU"), so then, under "gloo", or in builds without NCCL, the result stages over `host`
// (which it drives from then on); else NCCL with an id rank 0 makes and sends over `host`.
// "nccl" where NCCL cannot be used fails on every rank, saying why. `device`: this rank's GPU.
std::shared_ptr<DeviceTransport> connectDeviceTransport(std::shared_ptr<Transport> host,
                                                        int device,
                                                        const DeviceTransportOptions& options);

}  // namespace cerar
