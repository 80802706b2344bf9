#include "core/config/bootstrap.h"

#include <gloo/common/error.h>

#ifndef CERAR_NO_GLOO

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/job_config.h"
#include "core/config/membership.h"
#include "core/config/shm_links.h"
#include "core/log.h"
#include "rendezvous/data_address.h"
#include "rendezvous/tcp_store.h"
#include "common/error.h"
#include "ops/transport/gloo_tcp.h"
#include "ops/transport/link_auth.h"
#include "ops/transport/subset.h"

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

// The rendezvous store as the board where failures are posted (core/control/blame.h).
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

using std::chrono::milliseconds;

// How long one data link may take to start (GlooOptions::startLimit): far above what a link
// between live ranks needs, and short enough that a stray connection fails start-up in seconds.
constexpr milliseconds kLinkStartLimit{1000};

// How long rank 0 of a job without an identity waits, once its ranks are in, for a second
// process that claims one of their ranks (membership.h): the ranks of jobs started together
// (by hand, by a script) start within it.
constexpr milliseconds kTwinGrace{1000};

// The key the data links prove at start-up (link_auth.h): the job secret; without one (a
// single-host job, whose store is a private Unix socket) 16 random bytes from rank 0 through
// the store, fresh for each start.
std::string linkKeyOf(TcpStore& store, const RuntimeConfig& config, const std::string& prefix) {
  if (!config.secret.empty()) return config.secret;
  std::vector<uint8_t> mine;
  if (config.rank == 0) {
    const LinkNonce random = freshLinkNonce();
    mine.assign(random.begin(), random.end());
  }
  const auto key = exchangeThroughStore(store, prefix + "/link-key", config.rank, mine);
  return std::string(key.begin(), key.end());
}

// The job's outcome of the links' start-up, the same on every rank: each rank posts its own
// ("" for ok) and tallies itself, a failure as such; the failure of the lowest rank that posted
// one decides. Once a failure is counted, only `grace` more (the other ends of a failed link
// fail within their start limit).
Status readLinkOutcomes(TcpStore& store, const std::string& prefix, int rank, int size,
                        const Status& mine, milliseconds limit, milliseconds grace) {
  auto key = [&](int r) { return detail::concat(prefix, "/links-started/", r); };
  store.set(key(rank), std::vector<char>(mine.message.begin(), mine.message.end()), limit);
  const int64_t count = tallyReports(store, prefix + "/links-reported", mine.ok(), size, limit,
                                     grace, milliseconds(10));
  if (count < kFailedReport && count % kFailedReport == size) return Status();
  int missing = -1;
  for (int r = 0; r < size; ++r) {
    if (!store.check({key(r)}, limit)) {
      if (missing < 0) missing = r;
      continue;
    }
    const std::vector<char> text = store.get(key(r), limit);
    if (!text.empty()) return Status(StatusCode::kPeerLost, std::string(text.begin(), text.end()));
  }
  return Status(StatusCode::kTimeout,
                detail::concat("rank ", std::max(missing, 0), " did not report its data links' "
                               "start-up within ", limit.count(), " ms"),
                std::max(missing, 0));
}

Status agreeOnLinks(TcpStore& store, const std::string& prefix, int rank, int size,
                    const Status& mine, milliseconds limit, milliseconds grace) {
  try {
    return readLinkOutcomes(store, prefix, rank, size, mine, limit, grace);
  } catch (const std::exception& e) {
    // The store is gone (its host failed: a rank that a stranger's message ended, say).
    if (!mine.ok()) return mine;
    return Status(StatusCode::kPeerLost,
                  detail::concat("the rendezvous store failed while the ranks agreed on their "
                                 "data links' start-up: ", e.what()));
  }
}

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
  // Links made on demand: at start only the ring's and the control tree's (the job's fanout:
  // the tree the negotiation travels); the others on first use.
  // The collectives at start (the link probe's) take the default fanout's tree: its links too.
  if (agreed.lazyLinks) {
    std::vector<int> peers = planPeers(agreed.rank, agreed.size, std::max(1, agreed.controlFanout));
    for (int peer : planPeers(agreed.rank, agreed.size, kDefaultControlFanout)) {
      if (std::find(peers.begin(), peers.end(), peer) == peers.end()) peers.push_back(peer);
    }
    std::sort(peers.begin(), peers.end());
    options.eagerPeers = std::move(peers);
  }
  return options;
}

// A layered job's two levels (ops/hierarchical.h): the host's ranks over shared memory where
// every rank of the host maps it, else over their TCP links; the ranks of this rank's local
// rank, one per host, over theirs. Each level on a channel of its own where the links have them.
void layerLinks(TcpStore& store, const AgreedHosts& hosts, const std::string& prefix,
                JobLinks& links, const Logger& logger) {
  const HostTopology& topology = hosts.topology;
  const int rank = links.config.rank;
  const auto over = [&](uint32_t tag, std::vector<int> members) -> std::shared_ptr<Transport> {
    std::shared_ptr<Transport> channel = links.transport->channel(tag);
    return std::make_shared<SubsetTransport>(channel ? channel : links.transport,
                                             std::move(members));
  };
  std::string why = "shared memory is off (CERAR_SHARED_MEMORY=0)";
  if (links.config.sharedMemory) {
    why.clear();
    links.local = sharedMemoryLinks(store, links.config, prefix, hosts, nullptr, &why);
  }
  links.localInMemory = links.local != nullptr;
  if (!links.local) {
    logger.log(LogLevel::kDebug, "shared memory not used on this host: " + why);
    links.local = over(kLocalChannelTag, topology.localMembers(rank));
  }
  links.cross = over(kCrossChannelTag, topology.crossMembers(rank));
  links.config.hosts = topology.hosts();
  links.config.ranksPerHost = topology.localSize(rank);
}

JobLinks connectLinks(const RuntimeConfig& config) {
  CERAR_CHECK_ARGUMENT(config.rendezvousPort > 0, "cerar: rank ", config.rank, " of ",
                       config.size, ": no rendezvous port (set CERAR_RENDEZVOUS_PORT)");
  auto rendezvous = std::make_shared<Rendezvous>();
  const StoreEndpoint endpoint = storeEndpointOf(config);  // the secret policy; may throw
  // Before anything is connected: a rank that cannot publish a usable address fails at once.
  const DataAddress data = dataAddressOf(config);
  // Another job's store on this address and port: a clear error at once on this rank, never a
  // member of the other job (docs/rendezvous.md, "One job, one store").
  const auto clash = [&](const std::string& what) {
    return InvalidArgumentError(detail::concat(
        "cerar: rank ", config.rank, ": ", what, "; each job needs a rendezvous port of its own: "
        "set CERAR_RENDEZVOUS_PORT (torchrun: MASTER_PORT) to a free port for one of them",
        config.jobId.empty() ? " (or CERAR_JOB_ID to a name of the job on all its ranks)" : ""));
  };
  if (config.hostStore && config.rank == 0) {
    try {
      rendezvous->server = std::make_unique<TcpStoreServer>(
          endpoint.listen, uint16_t(config.rendezvousPort), config.secret,
          StoreLimits::fromEnvironment(), config.jobId);
    } catch (const StoreAddressInUseError& e) {  // another job's store listens there
      throw clash(detail::concat("another job's rendezvous store already listens at ",
                                 endpoint.listen, " (port ", config.rendezvousPort, "): ",
                                 e.what()));
    }
    rendezvous->server->start();
  }
  try {
    rendezvous->store = std::make_shared<TcpStore>(endpoint.connect,
                                                   uint16_t(config.rendezvousPort),
                                                   config.secret, rendezvousTimeoutOf(config),
                                                   config.jobId);
  } catch (const ForeignJobError& e) {
    throw clash(e.what());
  }
  TcpStore& store = *rendezvous->store;
  // This process's n-th start on this store (under the scope, when given): every rank starts as
  // often, so the count names this incarnation's keys on every rank, also on a store that
  // outlives it (cerarrun's). An elastic generation's ranks agree on the scope instead.
  const std::string scope = config.rendezvousScope.empty()
                                ? std::string("cerar/runtime/")
                                : detail::concat("cerar/runtime/", config.rendezvousScope, "/");
  const int64_t epoch = store.add(detail::concat(scope, "starts/", config.rank), 1);
  // Rank 0's store lives one start: a second process as one rank there is another job's.
  const bool oneStart = config.hostStore && config.rendezvousScope.empty();
  if (oneStart && epoch > 1) throw clash(refuseTwin(store, scope, config.rank, epoch));
  const std::string prefix = detail::concat(scope, epoch);
  JobLinks links;
  links.config = agreeJobConfig(config, [&](const std::vector<uint8_t>& mine) {
    return exchangeThroughStore(store, prefix + "/job-settings", config.rank, mine);
  });
  GlooOptions gloo = glooOptionsOf(data, links.config, prefix);
  gloo.linkKey = linkKeyOf(store, config, prefix);
  // Links made on demand poll the store (which lives as long as the links) for their peer's
  // address instead of holding its connection in one long wait.
  gloo.storeHas = [client = rendezvous->store](const std::string& key) {
    return client->check({key});
  };
  gloo.startLimit = std::min(kLinkStartLimit, gloo.timeout);
  // A rank posts once its connects (up to 2 start limits) and its proof (2) are done; once a
  // failure is posted, the other end of its link fails within a start limit.
  gloo.agreeOnStart = [&, limit = 6 * gloo.startLimit](const Status& mine) {
    return agreeOnLinks(store, prefix, config.rank, config.size, mine, limit, gloo.startLimit);
  };
  std::shared_ptr<GlooTransport> tcp = connectGloo(store, config.rank, config.size, gloo);
  links.transport = tcp;
  if (oneStart) {
    // Without an identity nothing else tells the job's ranks from another job's: a twin that
    // starts within a moment of the job's last rank still fails the start.
    const milliseconds grace = config.jobId.empty() ? kTwinGrace : milliseconds(0);
    const std::string twin = sealMembership(store, scope, prefix, config.rank, grace,
                                            rendezvousTimeoutOf(config));
    if (!twin.empty()) throw clash(twin);
  }
  // Which ranks share a host, agreed once; a job on one host moves its data through shared
  // memory (Gloo's links carry the channels), a layered one gets its two levels.
  const AgreedHosts hosts = agreeOnHosts(store, links.config, prefix);
  links.topology = hosts.topology;
  links.config.localRank = hosts.topology.localRank(config.rank);
  links.config.localSize = hosts.topology.localSize(config.rank);
  const Logger logger(config.rank, parseLogLevel(config.logLevel), config.logSink);
  if (hosts.topology.hosts() == 1 && links.config.sharedMemory) {
    std::string why;
    if (auto shm = sharedMemoryLinks(store, links.config, prefix, hosts, links.transport, &why)) {
      links.transport = std::move(shm);
      links.config.linksInMemory = true;
    } else {
      logger.log(LogLevel::kDebug, "shared memory not used: " + why);
    }
  } else if (hosts.topology.layered()) {
    layerLinks(store, hosts, prefix, links, logger);
  }
  links.board = std::make_shared<StoreBoard>(rendezvous->store);
  // Rank 0 closes the store it hosts before any rank leaves the shutdown handshake: a rank
  // that starts again then reaches only the next incarnation's store.
  Rendezvous* hosted = rendezvous.get();
  links.beforeRelease = [hosted] { hosted->server.reset(); };
  const TcpStore* client = rendezvous->store.get();  // lives as long as the runtime
  const std::weak_ptr<GlooTransport> dataLinks = tcp;
  links.storeTraffic = [client, dataLinks, inMemory = links.config.linksInMemory ||
                                                          links.localInMemory](RuntimeStats& stats) {
    stats.sharedMemory = inMemory;
    if (const auto gloo = dataLinks.lock()) stats.dataLinks = uint64_t(gloo->linksConnected());
    const TcpStore::Traffic traffic = client->traffic();
    stats.rendezvousRequests = traffic.requests;
    stats.rendezvousBytesSent = traffic.bytesSent;
    stats.rendezvousBytesReceived = traffic.bytesReceived;
  };
  links.rendezvous = std::move(rendezvous);
  return links;
}

}  // namespace

int64_t tallyReports(TcpStore& store, const std::string& counter, bool ok, int size,
                     milliseconds limit, milliseconds grace, milliseconds poll) {
  using Clock = std::chrono::steady_clock;
  int64_t count = store.add(counter, ok ? 1 : kFailedReport + 1);
  auto deadline = Clock::now() + limit;
  bool failed = false;
  while (count % kFailedReport < size) {
    if (!failed && count >= kFailedReport) {
      failed = true;
      deadline = std::min(deadline, Clock::now() + grace);
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(poll);
    count = store.add(counter, 0);
  }
  return count;
}

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
