// Connecting a Gloo context's links for the job (connectGloo): the pairs' connects, the links'
// proof (link_auth.h) and the agreement on the outcome.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/device.h>

#include "common/error.h"
#include "ops/transport/gloo_message.h"
#include "ops/transport/gloo_tcp.h"
#include "ops/transport/lazy_links.h"
#include "ops/transport/link_auth.h"

namespace cerar {
namespace {

// The peers whose links connect at start: GlooOptions::eagerPeers, or every peer.
std::vector<int> startPeers(int rank, int size, const std::vector<int>& eager) {
  std::vector<int> peers;
  for (int peer : eager) {
    CERAR_ENFORCE(peer >= 0 && peer < size, "connectGloo: rank ", rank, ": eager peer ", peer,
                  " is not in a group of ", size);
    if (peer != rank) peers.push_back(peer);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  if (eager.empty()) {
    for (int peer = 0; peer < size; ++peer) {
      if (peer != rank) peers.push_back(peer);
    }
  }
  return peers;
}

// Links made on demand: each rank connects at start only to a few peers, which may still be
// waiting for theirs (a chain along the ring): a connect would then outwait its short start
// limit while ranks are still starting. So every rank first waits until every rank has
// published its addresses, as the full mesh's waits do by themselves: one key per rank,
// waited for in one request (O(N) bytes per rank).
void waitForEveryRank(gloo::rendezvous::Store& store, const GlooOptions& options, int rank,
                      int size) {
  const auto key = [&](int r) { return detail::concat(options.prefix, "/published/", r); };
  store.set(key(rank), {'1'});
  std::vector<std::string> all;
  for (int r = 0; r < size; ++r) all.push_back(key(r));
  store.wait(all, options.timeout);
}

// A context whose pairs connect as Gloo's connectFullMesh does (of each pair, Gloo's address
// order picks which end connects), but with each pair's address under a key of its own, so a
// rank reads only the addresses meant for it (O(N) bytes per rank, not O(N^2)), and with the
// limits split: the store's waits follow the job's timeout, the pairs' connects the short
// start limit, and a failed connect names its peer.
class LinkContext : public gloo::Context {
 public:
  using gloo::Context::Context;

  std::shared_ptr<gloo::transport::Context> links() const { return transportContext_; }

  void connect(gloo::rendezvous::Store& store, std::shared_ptr<gloo::transport::Device> device,
               const GlooOptions& options, const std::vector<int>& peers) {
    std::shared_ptr<gloo::transport::Context> links = device->createContext(rank, size);
    // The pairs copy it as they are created; Gloo waits 5 times it for a connect, so a connect
    // waits 2 start limits (a peer that died before connecting costs no more).
    links->setTimeout(options.startLimit * 2 / 5);
    // Set at once, so that closeConnections() reaches the pairs after a failed connect.
    device_ = std::move(device);
    transportContext_ = links;
    for (int peer : peers) {
      store.set(pairKey(options.prefix, rank, peer), links->createPair(peer)->address().bytes());
    }
    if (!options.eagerPeers.empty()) waitForEveryRank(store, options, rank, size);
    for (int peer : peers) {
      const std::string key = pairKey(options.prefix, peer, rank);
      store.wait({key}, options.timeout);
      const std::vector<char> address = store.get(key);
      try {
        links->getPair(peer)->connect(address);
      } catch (const std::exception& e) {
        throw PeerLostError(detail::concat("rank ", rank, ": its link to rank ", peer, " (",
                                           addressText(address), ") did not connect: ",
                                           glooMessage(e)),
                            peer);
      }
    }
    links->setTimeout(options.timeout);  // the default of a wait without a limit of its own
  }
};

// The links of `context`, connected and (with a key) proven; this rank's outcome.
// The store's own failures (a rank that never published) propagate.
Status startLinks(const std::shared_ptr<LinkContext>& context, gloo::rendezvous::Store& store,
                  std::shared_ptr<gloo::transport::Device> device, const GlooOptions& options,
                  const std::vector<int>& peers) {
  try {
    context->connect(store, std::move(device), options, peers);
    if (options.linkKey.empty() || peers.empty()) return Status();
    // A transport of its own, with the short limit: its failure closes every link of the
    // context, so the peers' proofs fail at once too.
    GlooTransport proof(context, options.startLimit, kLinkProofTag);
    return authenticateLinks(proof, options.linkKey, options.prefix, peers);
  } catch (const Error& e) {
    const Status seen = statusOf(e);
    if (seen.peer < 0) return seen;
    return Status(seen.code, strangerMessage(context->rank, seen.peer, e.what()), seen.peer);
  }
}

}  // namespace

std::unique_ptr<GlooTransport> connectGloo(gloo::rendezvous::Store& store, int rank, int size,
                                           const GlooOptions& options) {
  CERAR_ENFORCE(size >= 1 && rank >= 0 && rank < size, "connectGloo: rank ", rank,
                " is not in a group of ", size);
  CERAR_ENFORCE(options.timeout.count() > 0 && options.startLimit.count() > 0,
                "connectGloo: the timeout and the start limit must be positive");
  // A peer that dies turns our next write into SIGPIPE, which would kill this process.
  static std::once_flag sigpipe;
  std::call_once(sigpipe, [] { std::signal(SIGPIPE, SIG_IGN); });

  const std::string& prefix = options.prefix;
  const std::vector<int> peers = startPeers(rank, size, options.eagerPeers);
  const bool lazy = int(peers.size()) < size - 1;
  auto rendezvousFailed = [&](const std::string& why) {
    return Error(detail::concat("rank ", rank, ": Gloo rendezvous of ", size, " ranks (keys '",
                                prefix, "/...') failed: ", why));
  };
  const StrangerExitGuard guard(rank);  // until the links are proven or closed
  std::shared_ptr<LinkContext> context;
  Status outcome;
  try {
    gloo::transport::tcp::attr attr;
    if (!options.hostname.empty()) {
      attr.hostname = options.hostname;
    } else {
      attr.iface = options.iface;
    }
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<LinkContext>(rank, size);
    context->setTimeout(options.timeout);
    outcome = startLinks(context, store, std::move(device), options, peers);
  } catch (const std::exception& e) {
    throw rendezvousFailed(glooMessage(e));
  }
  if (options.agreeOnStart) outcome = options.agreeOnStart(outcome);
  if (!outcome.ok()) {
    try {
      context->closeConnections();
    } catch (...) {
    }
    throw Error(detail::concat("rank ", rank, ": ", outcome.message));
  }
  std::shared_ptr<LazyLinks> later;
  if (lazy) {
    std::vector<bool> connected(size, false);
    for (int peer : peers) connected[peer] = true;
    LazyLinks::Setup setup;
    setup.store = &store;
    setup.storeHas = options.storeHas;
    setup.prefix = prefix;
    setup.timeout = options.timeout;
    setup.linkKey = options.linkKey;
    later = std::make_shared<LazyLinks>(context, context->links(), std::move(setup),
                                        std::move(connected));
  }
  return std::make_unique<GlooTransport>(std::move(context), options.timeout, 0,
                                         std::move(later));
}


}  // namespace cerar
