// Shared-memory links between the ranks of one host: one segment (ShmSegment) holds a byte ring
// per ordered pair of ranks. A send is copied into the ring to its peer as space frees, a
// receive out of the ring from its peer as bytes arrive (two copies, no kernel, no socket).
// Waits block on a futex word of the waiting rank (8 ranks on 2 cores do not starve each
// other); while blocked a rank looks every 50 ms whether the peer it waits for has ended
// (PeerLostError) and gives up at the timeout (TimeoutError), naming the peer either way. As
// Gloo's transport, the first failure closes this rank's links (peers waiting on it fail with
// PeerLostError naming it) and leaves the transport unusable.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "common/status.h"
#include "ops/transport/shm_segment.h"
#include "ops/transport/transport.h"

namespace cerar {

// The segment's size for `size` ranks with rings of `ringBytes` (a power of two).
size_t shmSegmentBytes(int size, size_t ringBytes);
// The ring size for `size` ranks: up to 1 MiB per pair, at most about 256 MiB in all.
size_t shmRingBytes(int size);

class ShmTransport : public Transport {
 public:
  // `segment`: mapped by every rank of the group, shmSegmentBytes(size, ringBytes) long, zeroed
  // by its maker before any rank used it. `pids`: every rank's process, for the liveness looks.
  // `channels`: where channel() goes (a transport over other links), or null.
  ShmTransport(ShmSegment segment, int rank, int size, size_t ringBytes, Duration timeout,
               std::vector<pid_t> pids, std::shared_ptr<Transport> channels = nullptr);
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Duration timeout() const override { return timeout_; }
  void postSend(int peer, const void* data, size_t bytes) override;
  void postRecv(int peer, void* data, size_t bytes) override;
  void waitSend(int peer) override;
  void waitRecv(int peer) override;
  std::shared_ptr<Transport> channel(uint32_t tag) override;

  struct Layout;

 private:
  struct Transfer {
    char* data;
    size_t bytes;
    size_t done;
  };
  // Moves what the rings allow for every pending transfer; whether anything moved.
  bool progress();
  // Marks this rank's links closed and rings every peer (once).
  void close();
  [[noreturn]] void fail(Status failure);
  bool pushTo(int peer, Transfer& send);
  bool pullFrom(int peer, Transfer& recv);
  void wake(int peer);  // rings `peer`'s bell, waking it if it sleeps
  // Blocks until another rank rings this one (or 50 ms pass); throws when `peer` has ended or
  // the deadline passed.
  void sleep(uint32_t seen, int peer, bool send, std::chrono::steady_clock::time_point deadline);
  void wait(int peer, bool send);

  ShmSegment segment_;
  int rank_, size_;
  size_t ringBytes_;
  Duration timeout_;
  std::vector<pid_t> pids_;
  std::vector<int> pidfds_;  // -1 where pidfd_open is not available
  std::shared_ptr<Transport> channels_;
  std::unique_ptr<Layout> layout_;
  std::vector<std::deque<Transfer>> sends_, recvs_;
  std::chrono::steady_clock::time_point nextLook_;
  Status failure_;  // the first failure; not ok: unusable, every call repeats it
};

}  // namespace cerar
