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
      threads_.emplace_back([this, peer] { make(peer); });
      [[fallthrough]];
    case State::kMaking:
      queued_[peer].push_back(op);
      return;
  }
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

// The peer's address of the link, or empty if it did not come within the timeout (or this
// object stops). Polls where it can, so that the store is never held in a long wait.
std::vector<char> LazyLinks::peerAddress(int /*peer*/, const std::string& key) {
  if (!setup_.storeHas) {
    setup_.store->wait({key}, setup_.timeout);
    return setup_.store->get(key);
  }
  const auto deadline = Clock::now() + setup_.timeout;
  milliseconds pause(1);
  while (!setup_.storeHas(key)) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopping_ || Clock::now() >= deadline) return {};
    stopped_.wait_for(lock, std::min<milliseconds>(
                                pause, std::chrono::duration_cast<milliseconds>(
                                           deadline - Clock::now()) + milliseconds(1)));
    pause = std::min(pause * 2, milliseconds(50));
  }
  return setup_.store->get(key);
}

Status LazyLinks::connectAndProve(int peer) {
  std::vector<char> mine;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The pair copies the context's timeout, and Gloo waits 5 times it for a connect: the
    // connect then waits 2 start limits, as at start. Both ends are here within moments.
    links_->setTimeout(setup_.startLimit * 2 / 5);
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
  GlooTransport proof(context_, setup_.startLimit, kLinkProofTag);
  return authenticateLinks(proof, setup_.linkKey, setup_.prefix, {peer});
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
