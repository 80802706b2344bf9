// Connecting a Gloo context's links for the job (connectGloo): the pairs' connects, the links'
// proof (link_auth.h) and the agreement on the outcome.
#include <arpa/inet.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

#include "common/error.h"
#include "ops/transport/gloo_message.h"
#include "ops/transport/gloo_tcp.h"
#include "ops/transport/link_auth.h"

namespace cerar {
namespace {

// The link proof's slot: past any channel's tag (process sets count up from 0).
constexpr uint32_t kProofTag = 0xffffffffu;

// "127.0.0.1:41795" (or "[::1]:41795") from a Gloo TCP address's bytes.
std::string addressText(const std::vector<char>& bytes) {
  const gloo::transport::tcp::Address address(bytes);
  const sockaddr_storage& ss = address.getSockaddr();
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(ss);
    inet_ntop(AF_INET, &in.sin_addr, host, sizeof host);
    return detail::concat(host, ":", ntohs(in.sin_port));
  }
  const auto& in6 = reinterpret_cast<const sockaddr_in6&>(ss);
  inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof host);
  return detail::concat("[", host, "]:", ntohs(in6.sin6_port));
}

// A context whose pairs connect as Gloo's connectFullMesh does (each rank publishes one
// listening address per peer under its rank; of each pair, Gloo's address order picks which
// end connects), but with the limits split: the store's waits follow the job's timeout, the
// pairs' connects the short start limit, and a failed connect names its peer.
class LinkContext : public gloo::Context {
 public:
  using gloo::Context::Context;

  void connect(gloo::rendezvous::Store& store, std::shared_ptr<gloo::transport::Device> device,
               const GlooOptions& options) {
    std::shared_ptr<gloo::transport::Context> links = device->createContext(rank, size);
    // The pairs copy it as they are created; Gloo waits 5 times it for a connect, so a connect
    // waits 2 start limits (a peer that died before connecting costs no more).
    links->setTimeout(options.startLimit * 2 / 5);
    // Set at once, so that closeConnections() reaches the pairs after a failed connect.
    device_ = std::move(device);
    transportContext_ = links;
    std::vector<char> mine;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      const std::vector<char> bytes = links->createPair(peer)->address().bytes();
      mine.insert(mine.end(), bytes.begin(), bytes.end());
    }
    store.set(std::to_string(rank), mine);
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      store.wait({std::to_string(peer)}, options.timeout);
      const std::vector<char> theirs = store.get(std::to_string(peer));
      const size_t each = theirs.size() / size_t(size - 1);
      const size_t at = size_t(rank > peer ? rank - 1 : rank) * each;
      const std::vector<char> address(theirs.begin() + at, theirs.begin() + at + each);
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

// While links start, a stranger's well-formed Gloo message (a connection taken for a peer's)
// can break an invariant that Gloo checks on its network thread (its TCP pair's reader),
// where nothing catches the exception: std::terminate would abort the process. Cerar cannot
// stop that thread from reading; it can end the process with its own message and status
// instead of SIGABRT, so the other ranks fail their start-up with the pair named.
class StrangerExitGuard {
 public:
  explicit StrangerExitGuard(int rank) {
    rank_ = rank;
    previous_ = std::set_terminate(onTerminate);
  }
  ~StrangerExitGuard() { std::set_terminate(previous_); }
  StrangerExitGuard(const StrangerExitGuard&) = delete;
  StrangerExitGuard& operator=(const StrangerExitGuard&) = delete;

 private:
  static void onTerminate() {
    try {
      if (std::exception_ptr failure = std::current_exception()) std::rethrow_exception(failure);
    } catch (const gloo::EnforceNotMet& e) {
      std::fprintf(stderr,
                   "cerar: rank %d: Gloo's network thread failed while the data links started "
                   "(%s): a connection that is not this job's sent a message on a link; "
                   "exiting with status %d\n",
                   rank_, realPorts(e.what()).c_str(), kStrangerExitStatus);
      std::_Exit(kStrangerExitStatus);
    } catch (...) {
    }
    if (previous_ != nullptr) previous_();
    std::abort();
  }
  static inline int rank_ = -1;
  static inline std::terminate_handler previous_ = nullptr;
};

// The links of `context`, connected and (with a key) proven; this rank's outcome.
// The store's own failures (a rank that never published) propagate.
Status startLinks(const std::shared_ptr<LinkContext>& context, gloo::rendezvous::Store& store,
                  std::shared_ptr<gloo::transport::Device> device, const GlooOptions& options) {
  try {
    context->connect(store, std::move(device), options);
    if (options.linkKey.empty()) return Status();
    // A transport of its own, with the short limit: its failure closes every link of the
    // context, so the peers' proofs fail at once too.
    GlooTransport proof(context, options.startLimit, kProofTag);
    return authenticateLinks(proof, options.linkKey, options.prefix);
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
    gloo::rendezvous::PrefixStore scoped(prefix, store);
    outcome = startLinks(context, scoped, std::move(device), options);
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
  return std::make_unique<GlooTransport>(std::move(context), options.timeout);
}


}  // namespace cerar
