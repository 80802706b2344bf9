// Which ranks share a host, and shared-memory links among them (CERAR_SHARED_MEMORY): the ranks
// agree through the store where each runs (host name, boot and /dev/shm of each, never one
// rank's environment); on each host its lowest rank makes a segment under a fresh name, the
// host's ranks map it and report, and the maker unlinks it once all have: nothing stays in
// /dev/shm however the job ends.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "core/config/host_topology.h"
#include "core/config/runtime_config.h"
#include "ops/transport/transport.h"
#include "rendezvous/tcp_store.h"

namespace cerar {

struct AgreedHosts {
  HostTopology topology;
  std::vector<pid_t> pids;  // every rank's process
};

// Every rank posts its process and host; rank 0 reads them all and posts one table, which every
// rank reads. Keys under `prefix`/hosts.
AgreedHosts agreeOnHosts(TcpStore& store, const RuntimeConfig& agreed, const std::string& prefix);

// The shared-memory transport among the ranks of this rank's host (numbered by local rank),
// whose channels go over `channels` (may be null); null on every rank of the host alike when it
// has one rank or a rank could not map the segment (then `why` says so). Keys under
// `prefix`/shm.
std::shared_ptr<Transport> sharedMemoryLinks(TcpStore& store, const RuntimeConfig& agreed,
                                             const std::string& prefix, const AgreedHosts& hosts,
                                             std::shared_ptr<Transport> channels,
                                             std::string* why);

}  // namespace cerar
