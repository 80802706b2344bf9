// What a runtime starts from: its transport, the settings every rank agreed on, and, when
// started through the rendezvous store, what the store serves it for the job (the failure
// board, the counters). Runtime::start connects it (the store, Gloo's links, the data address);
// Runtime::startWith wraps a caller's transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/config/host_topology.h"
#include "core/control/blame.h"
#include "core/config/runtime_config.h"
#include "core/runtime_stats.h"

namespace cerar {

class Transport;
class TcpStore;

// A tally of the ranks' reports in one store counter: each rank adds 1 for an ok report and
// kFailedReport + 1 for a failed one, then polls the counter alone (one request per poll,
// whatever the job's size) until `size` ranks have reported or `limit` passes; once a failure
// is counted, only `grace` more. Returns the counter's last value: value % kFailedReport ranks
// had reported, and value >= kFailedReport when one of them failed.
constexpr int64_t kFailedReport = int64_t(1) << 32;
int64_t tallyReports(TcpStore& store, const std::string& counter, bool ok, int size,
                     std::chrono::milliseconds limit, std::chrono::milliseconds grace,
                     std::chrono::milliseconds poll);

// The channels of a layered job's two levels (the job's links' tag spaces; process sets take
// their ids, the device path kDeviceChannelTag).
constexpr uint32_t kLocalChannelTag = 0xC0000001u;
constexpr uint32_t kCrossChannelTag = 0xC0000002u;

struct JobLinks {
  RuntimeConfig config;  // the job-wide settings every rank agreed on (core/config/job_config.h)
  std::shared_ptr<Transport> transport;
  // Which ranks share a host, as the ranks agreed (through the store; else a caller's
  // declaration or one host).
  HostTopology topology;
  // A layered job's levels (HostTopology::layered; ops/hierarchical.h): this rank's host, and
  // the ranks of its local rank across hosts; null otherwise. localInMemory: the host's level
  // is shared memory.
  std::shared_ptr<Transport> local, cross;
  bool localInMemory = false;
  std::shared_ptr<void> rendezvous;   // the store (and rank 0's server), kept for the job
  std::shared_ptr<BlameBoard> board;  // where failures are posted; null: nowhere
  // Runs on rank 0 before any rank leaves the shutdown handshake (closes the store it hosts).
  std::function<void()> beforeRelease;
  // Adds the store's counters to the stats; empty without a store.
  std::function<void(RuntimeStats&)> storeTraffic;
};

// Connects `config`'s rank (of more than one) through the rendezvous store: the secret policy,
// the data address (and NCCL's variables that follow it), rank 0's settings, Gloo's links.
// Throws Error when a step fails; InvalidArgumentError when a setting forbids it.
JobLinks connectThroughStore(const RuntimeConfig& config);

}  // namespace cerar
