// Shared-memory links for a job whose ranks all share one host (CERAR_SHARED_MEMORY): the ranks
// agree through the store that they do (host name, boot and /dev/shm of each, never one rank's
// environment), rank 0 makes the segment under a fresh name, every rank maps it and reports,
// and rank 0 unlinks it once all have: nothing stays in /dev/shm however the job ends.
#pragma once

#include <memory>
#include <string>

#include "core/config/runtime_config.h"
#include "ops/transport/transport.h"
#include "rendezvous/tcp_store.h"

namespace cerar {

// The shared-memory transport for `agreed`'s rank, whose channels go over `tcp`; null on every
// rank alike when the ranks are not all on one host or a rank could not map the segment (then
// `why` says so). Keys under `prefix`/shm.
std::shared_ptr<Transport> sharedMemoryLinks(TcpStore& store, const RuntimeConfig& agreed,
                                             const std::string& prefix,
                                             std::shared_ptr<Transport> tcp, std::string* why);

}  // namespace cerar
