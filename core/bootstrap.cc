#include "core/bootstrap.h"

#include <gloo/common/error.h>

#ifndef CERAR_NO_GLOO

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/job_config.h"
#include "core/log.h"
#include "core/rendezvous/data_address.h"
#include "core/rendezvous/tcp_store.h"
#include "ops/common/error.h"
#include "ops/transport/gloo_tcp.h"

namespace cerar {
namespace {

// The address of this rank's data links (data_address.h), logged at info; NCCL's sockets, when
// a device transport is built, follow the same choice unless NCCL_SOCKET_IFNAME is set.
DataAddress dataAddressOf(const RuntimeConfig& config) {
  DataAddressInputs inputs;
  inputs.rank = config.rank;
  inputs.iface = config.iface;
  inputs.ifaceBy = config.ifaceVariable;
  inputs.rendezvousAddr = config.rendezvousAddr;
  inputs.peersRemote = config.localSize < config.size;
  inputs.interfaces = localInterfaces();
  DataAddress data = chooseDataAddress(inputs);
  Logger(config.rank, parseLogLevel(config.logLevel), config.logSink)
      .log(LogLevel::kInfo, "data links on " + data.reason);
  if (config.deviceOps) {
    const auto lookup = [](const std::string& name) -> std::optional<std::string> {
      const char* value = std::getenv(name.c_str());
      return value == nullptr ? std::nullopt : std::optional<std::string>(value);
    };
    for (const auto& [name, value] : ncclEnvironmentFor(data, lookup)) {
      setenv(name.c_str(), value.c_str(), 0);  // before NCCL reads it at its first init
    }
  }
  return data;
}

// Rank 0's bytes under `key` to every rank.
std::vector<uint8_t> exchangeThroughStore(TcpStore& store, const std::string& key, int rank,
                                          const std::vector<uint8_t>& mine) {
  try {
    if (rank == 0) {
      store.set(key, std::vector<char>(mine.begin(), mine.end()));
      return mine;
    }
    const std::vector<char> bytes = store.get(key);
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
  } catch (const gloo::IoException& e) {  // the store lost or silent: rank 0 did not post
    throw TimeoutError(detail::concat("cerar: rank ", rank, ": the job settings from rank 0 ('",
                                      key, "' at ", store.address(), ") did not arrive: ",
                                      e.what()),
                       0);
  }
}

// The rendezvous store as the board where failures are posted (core/blame.h).
class StoreBoard final : public BlameBoard {
 public:
  explicit StoreBoard(std::shared_ptr<TcpStore> store) : store_(std::move(store)) {}
  void post(const std::string& key, const std::string& value,
            std::chrono::milliseconds limit) override {
    store_->set(key, std::vector<char>(value.begin(), value.end()), limit);
  }
  std::optional<std::string> read(const std::string& key,
                                  std::chrono::milliseconds limit) override {
    if (!store_->check({key}, limit)) return std::nullopt;
    auto value = store_->get(key, limit);
    return std::string(value.begin(), value.end());
  }
  void postOnLoss(const std::string& key, std::chrono::milliseconds limit) override {
    store_->setOnLoss(key, {}, limit);
  }

 private:
  std::shared_ptr<TcpStore> store_;
};

// Members in this order: the store (a client) closes before rank 0's server.
struct Rendezvous {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<TcpStore> store;  // shared with the blame board
};

GlooOptions glooOptionsOf(const DataAddress& data, const RuntimeConfig& agreed,
                          const std::string& prefix) {
  GlooOptions options;
  if (data.named) {
    options.iface = data.iface;
  } else {
    options.hostname = data.address;
  }
  options.timeout = timeoutOf(agreed);
  options.prefix = prefix + "/links";
  return options;
}

JobLinks connectLinks(const RuntimeConfig& config) {
  CERAR_CHECK_ARGUMENT(config.rendezvousPort > 0, "cerar: rank ", config.rank, " of ",
                       config.size, ": no rendezvous port (set CERAR_RENDEZVOUS_PORT)");
  auto rendezvous = std::make_shared<Rendezvous>();
  const StoreEndpoint endpoint = storeEndpointOf(config);  // the secret policy; may throw
  // Before anything is connected: a rank that cannot publish a usable address fails at once.
  const DataAddress data = dataAddressOf(config);
  if (config.hostStore && config.rank == 0) {
    rendezvous->server = std::make_unique<TcpStoreServer>(
        endpoint.listen, uint16_t(config.rendezvousPort), config.secret,
        StoreLimits::fromEnvironment());
    rendezvous->server->start();
  }
  rendezvous->store = std::make_shared<TcpStore>(endpoint.connect,
                                                 uint16_t(config.rendezvousPort), config.secret,
                                                 rendezvousTimeoutOf(config));
  TcpStore& store = *rendezvous->store;
  // This process's n-th start on this store (under the scope, when given): every rank starts as
  // often, so the count names this incarnation's keys on every rank, also on a store that
  // outlives it (cerarrun's). An elastic generation's ranks agree on the scope instead.
  const std::string scope = config.rendezvousScope.empty()
                                ? std::string("cerar/runtime/")
                                : detail::concat("cerar/runtime/", config.rendezvousScope, "/");
  const int64_t epoch = store.add(detail::concat(scope, "starts/", config.rank), 1);
  const std::string prefix = detail::concat(scope, epoch);
  JobLinks links;
  links.config = agreeJobConfig(config, [&](const std::vector<uint8_t>& mine) {
    return exchangeThroughStore(store, prefix + "/job-settings", config.rank, mine);
  });
  links.transport = connectGloo(store, config.rank, config.size,
                                glooOptionsOf(data, links.config, prefix));
  links.board = std::make_shared<StoreBoard>(rendezvous->store);
  // Rank 0 closes the store it hosts before any rank leaves the shutdown handshake: a rank
  // that starts again then reaches only the next incarnation's store.
  Rendezvous* hosted = rendezvous.get();
  links.beforeRelease = [hosted] { hosted->server.reset(); };
  const TcpStore* client = rendezvous->store.get();  // lives as long as the runtime
  links.storeTraffic = [client](RuntimeStats& stats) {
    const TcpStore::Traffic traffic = client->traffic();
    stats.rendezvousRequests = traffic.requests;
    stats.rendezvousBytesSent = traffic.bytesSent;
    stats.rendezvousBytesReceived = traffic.bytesReceived;
  };
  links.rendezvous = std::move(rendezvous);
  return links;
}

}  // namespace

JobLinks connectThroughStore(const RuntimeConfig& config) {
  try {
    return connectLinks(config);
  } catch (const gloo::IoException& e) {
    // The store client and Gloo's links fail with Gloo's type once their wait runs out (a store
    // or peer that never answered): cerar's class for a silent peer, not Gloo's.
    throw TimeoutError(detail::concat("cerar: rank ", config.rank, " of ", config.size,
                                      ": the rendezvous did not complete: ", e.what()));
  }
}

}  // namespace cerar

#endif  // CERAR_NO_GLOO
