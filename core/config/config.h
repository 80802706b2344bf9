// Reading and checking RuntimeConfig (CERAR_* knobs and the launchers' variables).
#pragma once

#include <chrono>
#include <string>

#include "core/config/runtime_config.h"
#include "common/env.h"

namespace cerar {

// RuntimeConfig::fromEnvironment over any lookup (tests pass a map). Identity comes from the
// first launcher found: cerarrun (CERAR_RANK, ...), torchrun (RANK, WORLD_SIZE, ...), Open MPI
// (OMPI_COMM_WORLD_*), SLURM (SLURM_PROCID, ...); none means a single process.
// Throws Error naming the variable and its value when one is malformed.
RuntimeConfig configFromEnvironment(const EnvironmentLookup& lookup);

// Checks ranges and combinations; throws Error naming the setting and its value.
void validateConfig(const RuntimeConfig& config);

// CERAR_TIMEOUT_SECONDS as the limit of one wait.
std::chrono::milliseconds timeoutOf(const RuntimeConfig& config);
// This rank's limit for reaching the rendezvous store and rank 0's settings:
// CERAR_RENDEZVOUS_TIMEOUT_SECONDS, or else its own CERAR_TIMEOUT_SECONDS.
std::chrono::milliseconds rendezvousTimeoutOf(const RuntimeConfig& config);

// Where the rendezvous store listens (when this rank hosts it) and where every rank reaches
// it, by the secret policy (docs/rendezvous.md): with CERAR_SECRET, or a store hosted by
// someone else (cerarrun), the configured TCP address; without one, a single-host job's store
// is a Unix-domain socket in a directory only this user can open. Throws Error with the fix
// when the store must be reachable from other hosts and there is no secret.
struct StoreEndpoint {
  std::string listen;   // a host to bind ("0.0.0.0" for every interface) or "unix:/path"
  std::string connect;  // a host or "unix:/path"
};
StoreEndpoint storeEndpointOf(const RuntimeConfig& config);

// The port rank 0's store uses under torchrun: MASTER_PORT + 1, since torchrun's own store
// holds MASTER_PORT.
constexpr int kTorchrunPortOffset = 1;
// The port under Open MPI without CERAR_RENDEZVOUS_PORT (torchrun's default + 1).
constexpr int kDefaultRendezvousPort = 29501;

}  // namespace cerar
