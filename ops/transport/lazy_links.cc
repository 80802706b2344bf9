#include "ops/transport/lazy_links.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/unbound_buffer.h>

#include "common/error.h"
#include "ops/transport/gloo_message.h"
#include "ops/transport/gloo_tcp.h"
#include "ops/transport/link_auth.h"

namespace cerar {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

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

namespace {

std::mutex guardMutex;
int guardHolders = 0;
int guardRank = -1;  // the first holder's, for the message
std::terminate_handler guardPrevious = nullptr;

}  // namespace

StrangerExitGuard::StrangerExitGuard(int rank) {
  std::lock_guard<std::mutex> lock(guardMutex);
  if (guardHolders++ == 0) {
    guardRank = rank;
    guardPrevious = std::set_terminate(onTerminate);
  }
}

StrangerExitGuard::~StrangerExitGuard() {
  std::lock_guard<std::mutex> lock(guardMutex);
  if (--guardHolders == 0) std::set_terminate(guardPrevious);
}

void StrangerExitGuard::onTerminate() {
  try {
    if (std::exception_ptr failure = std::current_exception()) std::rethrow_exception(failure);
  } catch (const gloo::EnforceNotMet& e) {
    std::fprintf(stderr,
                 "cerar: rank %d: Gloo's network thread failed while the data links started "
                 "(%s): a connection that is not this job's sent a message on a link; "
                 "exiting with status %d\n",
                 guardRank, realPorts(e.what()).c_str(), kStrangerExitStatus);
    std::_Exit(kStrangerExitStatus);
  } catch (...) {
  }
  // Read without the lock: the process is ending, and a holder may be what terminates.
  if (guardPrevious != nullptr) guardPrevious();
  std::abort();
}

LazyLinks::LazyLinks(std::shared_ptr<gloo::Context> context,
                     std::shared_ptr<gloo::transport::Context> links, Setup setup,
                     std::vector<bool> connected)
    : context_(std::move(context)),
      links_(std::move(links)),
      setup_(std::move(setup)),
      rank_(context_->rank),
      size_(context_->size),
      state_(size_, State::kNone),
      neededAt_(size_),
      proving_(size_, nullptr),
      failure_(size_),
      queued_(size_) {
  CERAR_ENFORCE(setup_.store != nullptr, "LazyLinks: no store");
  CERAR_ENFORCE(int(connected.size()) == size_, "LazyLinks: ", connected.size(),
                " link states for ", size_, " ranks");
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_ && connected[peer]) {
      state_[peer] = State::kUp;
      ++connected_;
    }
  }
}

LazyLinks::~LazyLinks() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    // A link being made may wait up to the job's timeout in its connect or its proof: closing
    // its pair ends the connect's wait, aborting its proof the proof's (a link's thread checks
    // stopping_ before each step, so one between steps stops too).
    for (int peer = 0; peer < size_; ++peer) {
      if (state_[peer] != State::kMaking) continue;
      if (const auto& pair = links_->getPair(peer)) pair->close();
      if (proving_[peer] != nullptr) proving_[peer]->abort();
    }
  }
  stopped_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void LazyLinks::postNow(const Queued& op, int peer) {
  if (op.send) {
    op.buffer->send(peer, op.slot, op.offset, op.bytes);
  } else {
    op.buffer->recv(peer, op.slot, op.offset, op.bytes);
  }
}

void LazyLinks::post(const void* owner, bool send, int peer,
                     gloo::transport::UnboundBuffer* buffer, uint64_t slot, size_t offset,
                     size_t bytes) {
  const Queued op{owner, send, buffer, slot, offset, bytes};
  std::lock_guard<std::mutex> lock(mutex_);
  switch (state_[peer]) {
    case State::kUp:
      postNow(op, peer);
      return;
    case State::kFailed:
      failure_[peer].raise();
    case State::kNone:
      state_[peer] = State::kMaking;
      need(peer);
      threads_.emplace_back([this, peer] { make(peer); });
      [[fallthrough]];
    case State::kMaking:
      need(peer);
      queued_[peer].push_back(op);
      return;
  }
}

void LazyLinks::need(int peer) { neededAt_[peer] = Clock::now(); }

void LazyLinks::waiting(int peer) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_[peer] == State::kMaking) need(peer);
}

void LazyLinks::forget(const void* owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& queue : queued_) {
    queue.erase(std::remove_if(queue.begin(), queue.end(),
                               [owner](const Queued& op) { return op.owner == owner; }),
                queue.end());
  }
}

void LazyLinks::closeConnections() {
  std::lock_guard<std::mutex> lock(mutex_);
  context_->closeConnections();
}

bool LazyLinks::connected(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_[peer] == State::kUp;
}

Status LazyLinks::failureOf(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_[peer];
}

int LazyLinks::linksConnected() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return connected_;
}

// The peer's address of the link, or empty if it did not come within the timeout of the
// link's latest post or wait (or this object stops): a transfer posted early, or waited for
// after others, leaves its peer as long as the wait on it does. Polls where it can, so that
// the store is never held in a long wait.
std::vector<char> LazyLinks::peerAddress(int peer, const std::string& key) {
  if (!setup_.storeHas) {
    setup_.store->wait({key}, setup_.timeout);
    return setup_.store->get(key);
  }
  milliseconds pause(1);
  while (!setup_.storeHas(key)) {
    std::unique_lock<std::mutex> lock(mutex_);
    const Clock::time_point deadline = neededAt_[peer] + setup_.timeout;
    const Clock::time_point now = Clock::now();
    if (stopping_ || now >= deadline) return {};
    stopped_.wait_for(lock, std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, milliseconds(50));
  }
  return setup_.store->get(key);
}

Status LazyLinks::closing(int peer) const {
  return Status(StatusCode::kPeerLost,
                detail::concat("rank ", rank_, ": its link to rank ", peer,
                               " was not made: the links are closing"),
                peer);
}

Status LazyLinks::connectAndProve(int peer) {
  std::vector<char> mine;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return closing(peer);
    // The pair copies the context's timeout, and Gloo waits 5 times it for a connect: the
    // connect then waits about the job's timeout, so that it outlasts a network outage that
    // the transfers on links made at start outlast.
    links_->setTimeout(std::max(setup_.timeout / 5, milliseconds(1)));
    mine = links_->createPair(peer)->address().bytes();
    links_->setTimeout(setup_.timeout);
  }
  setup_.store->set(pairKey(setup_.prefix, rank_, peer), mine);
  const std::string key = pairKey(setup_.prefix, peer, rank_);
  const std::vector<char> theirs = peerAddress(peer, key);
  if (theirs.empty()) {
    return Status(StatusCode::kTimeout,
                  detail::concat("rank ", rank_, ": its link to rank ", peer,
                                 " was not made: rank ", peer, " did not come to make it within ",
                                 setup_.timeout.count(), " ms (no address under '", key, "')"),
                  peer);
  }
  try {
    links_->getPair(peer)->connect(theirs);
  } catch (const std::exception& e) {
    return Status(StatusCode::kPeerLost,
                  detail::concat("rank ", rank_, ": its link to rank ", peer, " (",
                                 addressText(theirs), ") did not connect: ", glooMessage(e)),
                  peer);
  }
  if (setup_.linkKey.empty()) return Status();
  // Each step waits the job's timeout too. A silent stranger on the link then fails it no
  // sooner than a silent peer would; a stranger that answers fails the check at once.
  GlooTransport proof(context_, setup_.timeout, kLinkProofTag);
  // Its failure closes the context's links: under the lock, as other links' threads may
  // create their pairs meanwhile.
  proof.closeWith([this] { closeConnections(); });
  proof.allowAbort();  // the destructor may end its waits
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return closing(peer);  // the pair closed: its connect may have returned
    proving_[peer] = &proof;
  }
  const Status outcome = authenticateLinks(proof, setup_.linkKey, setup_.prefix, {peer});
  std::lock_guard<std::mutex> lock(mutex_);
  proving_[peer] = nullptr;
  return outcome;
}

void LazyLinks::make(int peer) {
  const StrangerExitGuard guard(rank_);  // until the link is up, proven or failed
  Status outcome;
  try {
    outcome = connectAndProve(peer);
  } catch (const std::exception& e) {
    outcome = Status(StatusCode::kPeerLost,
                     detail::concat("rank ", rank_, ": making its link to rank ", peer,
                                    " failed: ", glooMessage(e)),
                     peer);
  }
  finish(peer, std::move(outcome));
}

void LazyLinks::finish(int peer, Status outcome) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (outcome.ok()) {
    try {
      for (const Queued& op : queued_[peer]) postNow(op, peer);
    } catch (const std::exception& e) {
      outcome = Status(StatusCode::kPeerLost,
                       detail::concat("rank ", rank_, ": posting to rank ", peer,
                                      " on its new link failed: ", glooMessage(e)),
                       peer);
    }
  }
  if (outcome.ok()) {
    state_[peer] = State::kUp;
    ++connected_;
  } else {
    state_[peer] = State::kFailed;
    failure_[peer] = outcome;
    // The transfers waiting for the link end now, with its failure, not at their timeout.
    for (const Queued& op : queued_[peer]) {
      if (op.send) {
        op.buffer->abortWaitSend();
      } else {
        op.buffer->abortWaitRecv();
      }
    }
  }
  queued_[peer].clear();
}

}  // namespace cerar
