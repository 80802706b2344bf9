#include "ops/transport/gloo_tcp.h"

#include <arpa/inet.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <regex>

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/config.h>
#include <gloo/context.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "ops/common/error.h"
#include "ops/transport/link_auth.h"

namespace cerar {
namespace {

// Gloo's own collectives build their slots with prefixes 0x01..0x08; 0x43 keeps this
// transport's transfers apart from theirs on a shared context. One slot per channel suffices
// because Gloo matches the transfers of a (pair, slot) in posting order, which is the order we
// need; channels (process sets) take the slots after it.
constexpr uint8_t kSlotPrefix = 0x43;

// The link proof's slot: past any channel's tag (process sets count up from 0).
constexpr uint32_t kProofTag = 0xffffffffu;

// Gloo 0.5.0 prints an address's port as stored, in network byte order: "[127.0.0.1]:17315"
// for port 41795. The port as the kernel and the user know it, in every "]:<port>".
std::string realPorts(std::string text) {
#if GLOO_VERSION <= 500
  static const std::regex port(R"(\]:(\d+))");
  std::string out;
  auto last = text.cbegin();
  for (std::sregex_iterator it(text.begin(), text.end(), port), end; it != end; ++it) {
    const unsigned long raw = std::stoul((*it)[1].str());
    out.append(last, text.cbegin() + it->position());
    out += "]:" + std::to_string(raw <= 0xffff ? ntohs(uint16_t(raw)) : raw);
    last = text.cbegin() + it->position() + it->length();
  }
  out.append(last, text.cend());
  return out;
#else
  return text;
#endif
}

// Gloo prefixes its messages with "[file:line] "; the rank and peer we add say more.
std::string glooMessage(const std::exception& e) {
  std::string text = e.what();
  if (!text.empty() && text[0] == '[') {
    auto end = text.find("] ");
    if (end != std::string::npos) text.erase(0, end + 2);
  }
  return realPorts(text);
}

// "127.0.0.1:41795" (or "[::1]:41795") from a Gloo TCP address's bytes.
std::string addressText(const std::vector<char>& bytes) {
  const sockaddr_storage& ss = gloo::transport::tcp::Address(bytes).getSockaddr();
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

}  // namespace

GlooTransport::GlooTransport(std::shared_ptr<gloo::Context> context, Duration timeout,
                             uint32_t tag)
    : context_(std::move(context)),
      rank_(context_->rank),
      size_(context_->size),
      timeout_(timeout),
      slot_(gloo::Slot::build(kSlotPrefix, tag)),
      sends_(size_),
      recvs_(size_) {
  CERAR_ENFORCE(timeout_.count() > 0, "GlooTransport: the timeout must be positive");
}

std::shared_ptr<Transport> GlooTransport::channel(uint32_t tag) {
  return std::make_shared<GlooTransport>(context_, timeout_, tag);
}

GlooTransport::~GlooTransport() {
  bool pending = false;
  for (int peer = 0; peer < size_; ++peer) {
    pending = pending || !sends_[peer].empty() || !recvs_[peer].empty();
  }
  // Abandoned transfers: close the pairs so Gloo stops touching the caller's memory and the
  // peers fail at once instead of waiting for their timeout.
  if (pending && failure_.ok()) {
    try {
      context_->closeConnections();
    } catch (...) {
    }
  }
  sends_.clear();
  recvs_.clear();
}

void GlooTransport::checkUsable(int peer, const char* op) const {
  if (!failure_.ok()) {
    withContext(failure_, detail::concat("rank ", rank_, ": cannot ", op, " rank ", peer,
                                         ": the Gloo transport is unusable after an earlier "
                                         "failure ("), ")")
        .raise();
  }
  CERAR_ENFORCE(peer >= 0 && peer < size_ && peer != rank_, "rank ", rank_, ": cannot ", op,
                " rank ", peer, " in a group of ", size_);
}

void GlooTransport::fail(Status failure) {
  failure_ = std::move(failure);
  // Gloo has closed some or all pairs; close the rest so that no pending transfer writes into
  // memory the caller may free after this error, then drop every pending transfer.
  try {
    context_->closeConnections();
  } catch (...) {
  }
  for (int p = 0; p < size_; ++p) {
    sends_[p].clear();
    recvs_[p].clear();
  }
  failure_.raise();
}

void GlooTransport::post(bool send, int peer, void* data, size_t bytes) {
  checkUsable(peer, send ? "send to" : "receive from");
  CERAR_ENFORCE(bytes > 0 && data != nullptr, "rank ", rank_, ": zero-byte or null ",
                send ? "send to" : "receive from", " rank ", peer, " (not allowed)");
  try {
    Pending op{nullptr, nullptr, bytes};
    size_t offset = 0;
    auto* begin = static_cast<std::byte*>(data);
    for (const Region& region : regions_) {
      if (begin >= region.base && begin + bytes <= region.base + region.bytes) {
        op.buffer = region.buffer.get();
        offset = size_t(begin - region.base);
        break;
      }
    }
    if (op.buffer == nullptr) {
      op.owned = context_->createUnboundBuffer(data, bytes);
      op.buffer = op.owned.get();
      ++buffersCreated_;
    }
    if (send) {
      op.buffer->send(peer, slot_, offset, bytes);
    } else {
      op.buffer->recv(peer, slot_, offset, bytes);
    }
    (send ? sends_ : recvs_)[peer].push_back(std::move(op));
  } catch (const std::exception& e) {
    fail(Status(StatusCode::kPeerLost,
                detail::concat("rank ", rank_, ": posting a ", send ? "send" : "receive", " of ",
                               bytes, " bytes ", send ? "to" : "from", " rank ", peer,
                               " failed: ", glooMessage(e)),
                peer));
  }
}

bool GlooTransport::registerMemory(void* base, size_t bytes) {
  auto* begin = static_cast<std::byte*>(base);
  if (begin == nullptr || bytes == 0 || !failure_.ok()) return false;
  for (const Region& region : regions_) {
    if (begin < region.base + region.bytes && region.base < begin + bytes) return false;
  }
  regions_.push_back({begin, bytes, context_->createUnboundBuffer(base, bytes)});
  ++buffersCreated_;
  return true;
}

bool GlooTransport::pendingOn(const gloo::transport::UnboundBuffer* buffer) const {
  for (const auto* queues : {&sends_, &recvs_}) {
    for (const auto& queue : *queues) {
      for (const Pending& op : queue) {
        if (op.buffer == buffer) return true;
      }
    }
  }
  return false;
}

void GlooTransport::releaseMemory(void* base) {
  for (auto it = regions_.begin(); it != regions_.end(); ++it) {
    if (it->base != base) continue;
    if (pendingOn(it->buffer.get())) retired_.push_back(std::move(it->buffer));
    regions_.erase(it);
    return;
  }
}

void GlooTransport::wait(bool send, int peer) {
  checkUsable(peer, send ? "wait for a send to" : "wait for a receive from");
  auto& queue = (send ? sends_ : recvs_)[peer];
  CERAR_ENFORCE(!queue.empty(), "rank ", rank_, ": ", send ? "waitSend" : "waitRecv", "(",
                peer, ") without a pending transfer");
  Pending op = std::move(queue.front());
  queue.pop_front();
  const auto start = std::chrono::steady_clock::now();
  std::string why;
  try {
    if (send ? op.buffer->waitSend(timeout_) : op.buffer->waitRecv(timeout_)) return;
    why = "aborted";
  } catch (const std::exception& e) {
    why = glooMessage(e);
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  // Gloo ends a wait by throwing both on its timeout and on a broken link; only the time
  // spent tells them apart (its message text is not an interface).
  if (elapsed >= timeout_) {
    fail(Status(StatusCode::kTimeout,
                detail::concat("rank ", rank_, ": timed out after ", timeout_.count(),
                               " ms waiting to ", send ? "send " : "receive ", op.bytes,
                               " bytes ", send ? "to" : "from", " rank ", peer),
                peer));
  }
  fail(Status(StatusCode::kPeerLost,
              detail::concat("rank ", rank_, ": ", send ? "send of " : "receive of ", op.bytes,
                             " bytes ", send ? "to" : "from", " rank ", peer, " failed: ", why),
              peer));
}

void GlooTransport::postSend(int peer, const void* data, size_t bytes) {
  // Gloo's buffer type is not const-aware; a send only reads.
  post(true, peer, const_cast<void*>(data), bytes);
}
void GlooTransport::postRecv(int peer, void* data, size_t bytes) { post(false, peer, data, bytes); }
void GlooTransport::waitSend(int peer) { wait(true, peer); }
void GlooTransport::waitRecv(int peer) { wait(false, peer); }

namespace {

// While links start, a stranger's well-formed Gloo message (a connection taken for a peer's)
// can break an invariant that Gloo checks on its network thread (tcp/pair.cc), where nothing
// catches the exception: std::terminate would abort the process. Cerar cannot stop that
// thread from reading; it can end the process with its own message and status instead of
// SIGABRT, so the other ranks fail their start-up with the pair named.
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
