// NCCL point-to-point transport for device buffers (ncclSend/ncclRecv on the transport's stream).
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "ops/transport/device_transport.h"

namespace gloo::rendezvous {
class Store;
}

namespace cerar {

struct NcclOptions {
  std::chrono::milliseconds timeout{30000};  // rendezvous limit and default limit of a wait
  // Key prefix of the unique id in the store: fresh per connection on one store, the same on
  // every rank (keys are never overwritten).
  std::string prefix = "cerar-nccl";
  // Waits only order later work on the stream (no host wait; DeviceTransport::streamOrdered):
  // completion and failures are then observed by waitEvent().
  bool streamOrdered = false;
};

// The 128 bytes of an ncclUniqueId. It is the key of NCCL's bootstrap: it holds the root's
// address and a random magic that NCCL checks on every bootstrap connection, so it travels only
// through the job's locked store or over data links already proven (docs/rendezvous.md).
using NcclId = std::array<char, 128>;
// A fresh id (rank 0 makes one and shares it). Works without a GPU.
NcclId newNcclId();

// One rank of an NCCL communicator. Posts are buffered and enqueued together as one
// ncclGroupStart/End at the next wait (or flush()), so the send and the receive of a round —
// which the executor posts back to back and then waits on — share a group, as NCCL needs to
// avoid a ring deadlock. Each group is followed by an event; waits poll that event and
// ncclCommGetAsyncError against the timeout (a dead peer can leave NCCL spinning forever, so
// no wait blocks on CUDA or NCCL without a deadline).
//
// Failure: an NCCL error or a timeout aborts the communicator (ncclCommAbort) and throws
// TimeoutError/Error naming this rank and the peer; every later call throws at once. Build a
// new transport with a new id to recover. waitEvent() may run on another thread than the
// driving one: there a failure is recorded and thrown, and the driving thread aborts the
// communicator at its next call (or the destructor does), never both at once.
// Sending to oneself is allowed (NCCL supports it; a 1-rank communicator can only do that).
class NcclTransport : public DeviceTransport {
 public:
  ~NcclTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Duration timeout() const override { return timeout_; }
  void* stream() const override;
  bool streamOrdered() const override { return streamOrdered_; }
  bool waitEvent(void* event, Duration timeout) override;
  int device() const { return device_; }

  void postSend(int peer, const void* data, size_t bytes) override;
  void postRecv(int peer, void* data, size_t bytes) override;
  void waitSend(int peer) override;
  void waitRecv(int peer) override;
  // Enqueues the buffered posts now, as one group.
  void flush();

  // NCCL's own collectives over this communicator's ranks (one host's: NCCL takes its
  // intra-node paths), in place on stream() after the buffered posts, with no host wait.
  // `slices` as hierarchicalSlices (ops/hierarchical.h): equal, the last one with the rest,
  // which a reduce to (a broadcast from) the last rank carries. Afterwards this rank's slice
  // holds the reduction of it / every slice holds its rank's.
  void reduceScatter(void* data, const std::vector<size_t>& slices, DType dtype, ReduceOp op);
  void allGather(void* data, const std::vector<size_t>& slices, DType dtype);

  // Made by connectNcclWithId (Impl holds the communicator, the stream and the pending posts).
  struct Impl;
  NcclTransport(std::unique_ptr<Impl> impl, int rank, int size, int device, Duration timeout,
                bool streamOrdered = false);

 private:
  void checkUsable(int peer, const char* op);
  // One group of collectives (`calls` returns the first failure), checked like flush()'s.
  void collective(const char* what, const std::function<int()>& calls);
  void wait(bool send, int peer);
  // Polls `event` and the communicator's asynchronous error until `deadline`: "" once reached,
  // else why not (and whether it timed out).
  std::string poll(void* event, std::chrono::steady_clock::time_point deadline,
                   bool& timedOut) const;
  [[noreturn]] void fail(const std::string& what, bool timedOut, int peer);

  std::unique_ptr<Impl> impl_;
  int rank_;
  int size_;
  int device_;
  Duration timeout_;
  bool streamOrdered_;
  mutable std::mutex mutex_;  // failure_ (waitEvent may run beside the driving thread)
  std::string failure_;  // the first error; non-empty means unusable
};

// Joins the communicator of `id` as `rank` of `size` on CUDA device `device` (non-blocking
// init, polled against options.timeout). Throws cerar::Error naming the rank on failure.
std::unique_ptr<NcclTransport> connectNcclWithId(const NcclId& id, int rank, int size,
                                                 int device, const NcclOptions& options = {});

// Rank 0 makes the id and shares it through `store` under options.prefix + "/id"; every rank
// then joins. Not available in builds without Gloo.
std::unique_ptr<NcclTransport> connectNccl(gloo::rendezvous::Store& store, int rank, int size,
                                           int device, const NcclOptions& options = {});

}  // namespace cerar
