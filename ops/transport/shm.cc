#include "ops/transport/shm.h"

#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/error.h"

namespace cerar {

namespace {
// A rank's doorbell: bumped by whoever moved bytes it may wait for; a futex word.
struct alignas(64) Bell {
  std::atomic<uint32_t> value;
  std::atomic<uint32_t> sleepers;
  std::atomic<uint32_t> closed;  // the rank failed: its links are closed, as Gloo's would be
};
// A ring's byte count so far, on a cache line of its own (one writer each).
struct alignas(64) Counter {
  std::atomic<uint64_t> value;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "atomics shared between processes must be lock-free");

constexpr auto kLook = std::chrono::milliseconds(50);  // between liveness looks while blocked
constexpr int kSpins = 64;  // short spins before sleeping: the peer is often just behind

size_t pairs(int size) { return size_t(size) * size; }

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* limit) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, limit, nullptr, 0);
}

int openPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return int(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}
}  // namespace

// Bells [size], then heads and tails [from * size + to], then the rings, in the segment.
struct ShmTransport::Layout {
  Bell* bells;
  Counter* heads;  // bytes written into ring from -> to (by `from`)
  Counter* tails;  // bytes read out of it (by `to`)
  char* rings;
  int size;
  size_t ringBytes;
  size_t at(int from, int to) const { return size_t(from) * size + to; }
  char* ring(int from, int to) const { return rings + at(from, to) * ringBytes; }
};

size_t shmSegmentBytes(int size, size_t ringBytes) {
  return sizeof(Bell) * size + 2 * sizeof(Counter) * pairs(size) + ringBytes * pairs(size);
}

size_t shmRingBytes(int size) {
  size_t ring = size_t(1) << 20;
  while (ring > (size_t(64) << 10) && ring * pairs(size) > (size_t(256) << 20)) ring /= 2;
  return ring;
}

ShmTransport::ShmTransport(ShmSegment segment, int rank, int size, size_t ringBytes,
                           Duration timeout, std::vector<pid_t> pids,
                           std::shared_ptr<Transport> channels)
    : segment_(std::move(segment)), rank_(rank), size_(size), ringBytes_(ringBytes),
      timeout_(timeout), pids_(std::move(pids)), channels_(std::move(channels)),
      layout_(std::make_unique<Layout>()), sends_(size), recvs_(size) {
  CERAR_CHECK_ARGUMENT(size >= 1 && rank >= 0 && rank < size && int(pids_.size()) == size,
                       "shared memory: rank ", rank, " of ", size, " with ", pids_.size(),
                       " processes");
  CERAR_CHECK_ARGUMENT(ringBytes >= 64 && (ringBytes & (ringBytes - 1)) == 0,
                       "shared memory: ring of ", ringBytes, " bytes (a power of two)");
  CERAR_CHECK_ARGUMENT(segment_.size() >= shmSegmentBytes(size, ringBytes),
                       "shared memory: segment of ", segment_.size(), " bytes, ",
                       shmSegmentBytes(size, ringBytes), " needed");
  auto* base = static_cast<char*>(segment_.data());
  layout_->bells = reinterpret_cast<Bell*>(base);
  layout_->heads = reinterpret_cast<Counter*>(base + sizeof(Bell) * size);
  layout_->tails = layout_->heads + pairs(size);
  layout_->rings = reinterpret_cast<char*>(layout_->tails + pairs(size));
  layout_->size = size;
  layout_->ringBytes = ringBytes;
  for (pid_t pid : pids_) pidfds_.push_back(pid == getpid() ? -1 : openPidfd(pid));
}

ShmTransport::~ShmTransport() {
  close();
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
}

void ShmTransport::close() {
  if (layout_->bells[rank_].closed.exchange(1) != 0) return;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) wake(peer);
  }
}

void ShmTransport::fail(Status failure) {
  // As Gloo's transport: the first failure closes every link (the ranks waiting on this one
  // then fail too, naming it), drops what is pending, and every later call repeats it.
  failure_ = std::move(failure);
  close();
  for (int peer = 0; peer < size_; ++peer) {
    sends_[peer].clear();
    recvs_[peer].clear();
  }
  failure_.raise();
}

void ShmTransport::postSend(int peer, const void* data, size_t bytes) {
  if (!failure_.ok()) failure_.raise();
  CERAR_CHECK_ARGUMENT(peer >= 0 && peer < size_ && peer != rank_ && bytes > 0,
                       "shared memory: rank ", rank_, ": send of ", bytes, " bytes to ", peer);
  sends_[peer].push_back({static_cast<char*>(const_cast<void*>(data)), bytes, 0});
}

void ShmTransport::postRecv(int peer, void* data, size_t bytes) {
  if (!failure_.ok()) failure_.raise();
  CERAR_CHECK_ARGUMENT(peer >= 0 && peer < size_ && peer != rank_ && bytes > 0,
                       "shared memory: rank ", rank_, ": receive of ", bytes, " bytes from ",
                       peer);
  recvs_[peer].push_back({static_cast<char*>(data), bytes, 0});
}

void ShmTransport::waitSend(int peer) { wait(peer, true); }
void ShmTransport::waitRecv(int peer) { wait(peer, false); }

std::shared_ptr<Transport> ShmTransport::channel(uint32_t tag) {
  return channels_ ? channels_->channel(tag) : nullptr;
}

void ShmTransport::wake(int peer) {
  Bell& bell = layout_->bells[peer];
  bell.value.fetch_add(1);
  if (bell.sleepers.load() > 0) futex(&bell.value, FUTEX_WAKE, INT_MAX, nullptr);
}

bool ShmTransport::pushTo(int peer, Transfer& send) {
  const size_t at = layout_->at(rank_, peer);
  const uint64_t head = layout_->heads[at].value.load(std::memory_order_relaxed);
  const uint64_t tail = layout_->tails[at].value.load(std::memory_order_acquire);
  const size_t n = std::min(size_t(ringBytes_ - (head - tail)), send.bytes - send.done);
  if (n == 0) return false;
  char* ring = layout_->ring(rank_, peer);
  const size_t offset = size_t(head & (ringBytes_ - 1));
  const size_t first = std::min(n, ringBytes_ - offset);
  std::memcpy(ring + offset, send.data + send.done, first);
  std::memcpy(ring, send.data + send.done + first, n - first);
  layout_->heads[at].value.store(head + n, std::memory_order_release);
  send.done += n;
  wake(peer);
  return true;
}

bool ShmTransport::pullFrom(int peer, Transfer& recv) {
  const size_t at = layout_->at(peer, rank_);
  const uint64_t tail = layout_->tails[at].value.load(std::memory_order_relaxed);
  const uint64_t head = layout_->heads[at].value.load(std::memory_order_acquire);
  const size_t n = std::min(size_t(head - tail), recv.bytes - recv.done);
  if (n == 0) return false;
  const char* ring = layout_->ring(peer, rank_);
  const size_t offset = size_t(tail & (ringBytes_ - 1));
  const size_t first = std::min(n, ringBytes_ - offset);
  std::memcpy(recv.data + recv.done, ring + offset, first);
  std::memcpy(recv.data + recv.done + first, ring, n - first);
  layout_->tails[at].value.store(tail + n, std::memory_order_release);
  recv.done += n;
  wake(peer);  // room in its ring
  return true;
}

bool ShmTransport::progress() {
  bool moved = false;
  for (int peer = 0; peer < size_; ++peer) {
    // Transfers to and from one peer move in posting order: only the first unfinished one.
    for (Transfer& send : sends_[peer]) {
      if (send.done == send.bytes) continue;
      moved |= pushTo(peer, send);
      break;
    }
    for (Transfer& recv : recvs_[peer]) {
      if (recv.done == recv.bytes) continue;
      moved |= pullFrom(peer, recv);
      break;
    }
  }
  return moved;
}

void ShmTransport::sleep(uint32_t seen, int peer, bool send,
                         std::chrono::steady_clock::time_point deadline) {
  Bell& bell = layout_->bells[rank_];
  bell.sleepers.fetch_add(1);
  const timespec limit{0, long(std::chrono::nanoseconds(kLook).count())};
  futex(&bell.value, FUTEX_WAIT, seen, &limit);
  bell.sleepers.fetch_sub(1);
  // Rung by other ranks or not, look at the peer every kLook.
  const auto now = std::chrono::steady_clock::now();
  if (now < nextLook_) return;
  nextLook_ = now + kLook;
  const int fd = pidfds_[peer];
  pollfd ended{fd, POLLIN, 0};
  const bool gone = fd >= 0 ? poll(&ended, 1, 0) > 0 : kill(pids_[peer], 0) != 0 && errno == ESRCH;
  if (gone) {
    fail(Status(StatusCode::kPeerLost,
                detail::concat("rank ", rank_, ": shared memory: rank ", peer, " (process ",
                               pids_[peer], ") has ended"),
                peer));
  }
  if (now >= deadline) {
    fail(Status(StatusCode::kTimeout,
                detail::concat("rank ", rank_, ": shared memory: no ",
                               send ? "room for a send to" : "data from", " rank ", peer,
                               " within ", timeout_.count(), " ms"),
                peer));
  }
}

void ShmTransport::wait(int peer, bool send) {
  if (!failure_.ok()) failure_.raise();
  CERAR_CHECK_ARGUMENT(peer >= 0 && peer < size_ && !(send ? sends_ : recvs_)[peer].empty(),
                       "shared memory: rank ", rank_, ": a wait on ", peer,
                       " with nothing posted");
  std::deque<Transfer>& queue = send ? sends_[peer] : recvs_[peer];
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  nextLook_ = std::chrono::steady_clock::now() + kLook;
  int idle = 0;
  for (;;) {
    const uint32_t seen = layout_->bells[rank_].value.load();
    // Read before moving bytes: what a peer wrote before it closed (a normal end right after
    // its last send) is then taken below, and only a peer closed with nothing left fails us.
    const bool peerClosed = layout_->bells[peer].closed.load() != 0;
    const bool moved = progress();
    if (queue.front().done == queue.front().bytes) {
      queue.pop_front();
      return;
    }
    if (moved) {
      idle = 0;
    } else if (peerClosed) {
      fail(Status(StatusCode::kPeerLost,
                  detail::concat("rank ", rank_, ": ", send ? "send to" : "receive from",
                                 " rank ", peer, " failed: rank ", peer,
                                 " closed its shared-memory links"),
                  peer));
    } else if (++idle > kSpins) {
      sleep(seen, peer, send, deadline);
    }
  }
}

}  // namespace cerar
