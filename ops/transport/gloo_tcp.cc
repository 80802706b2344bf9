#include "ops/transport/gloo_tcp.h"

#include <algorithm>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "common/error.h"
#include "ops/control_tree.h"
#include "ops/transport/gloo_message.h"
#include "ops/transport/lazy_links.h"

namespace cerar {
namespace {

// Gloo's own collectives build their slots with prefixes 0x01..0x08; 0x43 keeps this
// transport's transfers apart from theirs on a shared context. One slot per channel suffices
// because Gloo matches the transfers of a (pair, slot) in posting order, which is the order we
// need; channels (process sets) take the slots after it.
constexpr uint8_t kSlotPrefix = 0x43;

}  // namespace

std::vector<int> planPeers(int rank, int size, int fanout) {
  CERAR_ENFORCE(size >= 1 && rank >= 0 && rank < size && fanout >= 1, "planPeers: rank ", rank,
                " of ", size, " with fanout ", fanout);
  const ControlTree tree{rank, size, fanout};
  std::vector<int> peers = tree.children();
  peers.push_back((rank + 1) % size);
  peers.push_back((rank + size - 1) % size);
  if (tree.parent() >= 0) peers.push_back(tree.parent());
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  peers.erase(std::remove(peers.begin(), peers.end(), rank), peers.end());
  return peers;
}

std::string pairKey(const std::string& prefix, int from, int to) {
  return detail::concat(prefix, "/pair/", from, "/", to);
}

GlooTransport::GlooTransport(std::shared_ptr<gloo::Context> context, Duration timeout,
                             uint32_t tag, std::shared_ptr<LazyLinks> links)
    : context_(std::move(context)),
      links_(std::move(links)),
      rank_(context_->rank),
      size_(context_->size),
      timeout_(timeout),
      slot_(gloo::Slot::build(kSlotPrefix, tag)),
      sends_(size_),
      recvs_(size_) {
  CERAR_ENFORCE(timeout_.count() > 0, "GlooTransport: the timeout must be positive");
}

std::shared_ptr<Transport> GlooTransport::channel(uint32_t tag) {
  return std::make_shared<GlooTransport>(context_, timeout_, tag, links_);
}

void GlooTransport::closeConnections() {
  // Links made on demand are created on threads of their own: close under their lock.
  if (close_) {
    close_();
  } else if (links_) {
    links_->closeConnections();
  } else {
    context_->closeConnections();
  }
}

int GlooTransport::linksConnected() const {
  return links_ ? links_->linksConnected() : size_ - 1;
}

GlooTransport::~GlooTransport() {
  bool pending = false;
  for (int peer = 0; peer < size_; ++peer) {
    pending = pending || !sends_[peer].empty() || !recvs_[peer].empty();
  }
  if (links_) links_->forget(this);
  // Abandoned transfers: close the pairs so Gloo stops touching the caller's memory and the
  // peers fail at once instead of waiting for their timeout.
  if (pending && failure_.ok()) {
    try {
      closeConnections();
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
  if (links_) links_->forget(this);  // before the buffers of its queued transfers go
  // Gloo has closed some or all pairs; close the rest so that no pending transfer writes into
  // memory the caller may free after this error, then drop every pending transfer.
  try {
    closeConnections();
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
    if (links_) {
      links_->post(this, send, peer, op.buffer, slot_, offset, bytes);
    } else if (send) {
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
  if (links_) links_->waiting(peer);  // a link still being made waits as long as this wait
  const auto start = std::chrono::steady_clock::now();
  std::string why = "aborted";
  // Only a transport that may be aborted marks its waits: the data links' waits take no lock.
  if (!abortable_ || watch(op.buffer, send)) {
    bool done = false;
    try {
      done = send ? op.buffer->waitSend(timeout_) : op.buffer->waitRecv(timeout_);
    } catch (const std::exception& e) {
      why = glooMessage(e);
    }
    if (abortable_) watch(nullptr, send);
    if (done) return;
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  if (links_) {
    // A link made on demand that failed aborts the waits on it: its own reason says more.
    Status link = links_->failureOf(peer);
    if (!link.ok()) fail(std::move(link));
    if (!links_->connected(peer) && elapsed >= timeout_) {
      fail(Status(StatusCode::kTimeout,
                  detail::concat("rank ", rank_, ": timed out after ", timeout_.count(),
                                 " ms waiting for its link to rank ", peer, " to be made"),
                  peer));
    }
  }
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

// Marks `buffer` as the one waited on (null: none); false once aborted.
bool GlooTransport::watch(gloo::transport::UnboundBuffer* buffer, bool send) {
  std::lock_guard<std::mutex> lock(abortMutex_);
  waitingOn_ = buffer;
  waitingSend_ = send;
  return !aborted_;
}

void GlooTransport::abort() {
  std::lock_guard<std::mutex> lock(abortMutex_);
  aborted_ = true;
  // Gloo keeps the abort until the wait runs, so one that has not yet begun ends too.
  if (waitingOn_ == nullptr) return;
  if (waitingSend_) {
    waitingOn_->abortWaitSend();
  } else {
    waitingOn_->abortWaitRecv();
  }
}

void GlooTransport::postSend(int peer, const void* data, size_t bytes) {
  // Gloo's buffer type is not const-aware; a send only reads.
  post(true, peer, const_cast<void*>(data), bytes);
}
void GlooTransport::postRecv(int peer, void* data, size_t bytes) { post(false, peer, data, bytes); }
void GlooTransport::waitSend(int peer) { wait(true, peer); }
void GlooTransport::waitRecv(int peer) { wait(false, peer); }

}  // namespace cerar
