// The state shared between the threads that enqueue operations and the coordinator thread:
// one OperationState per handle, one Entry per negotiated unit, and the queue between them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/device/device.h"
#include "core/control/message.h"
#include "core/types.h"

namespace cerar {

using Clock = std::chrono::steady_clock;

// What a Handle observes. complete() runs once; later calls are ignored.
struct OperationState {
  std::mutex mutex;
  std::condition_variable ended;
  // Set once, under the lock, after `status`: a reader that sees it true (acquire) reads the
  // outcome without the lock, as most waits of a step do (their operations ended already).
  std::atomic<bool> done{false};
  Status status;  // the outcome, once done
  Callback callback;
  // Written by the coordinator before complete(); read by the caller after wait().
  std::vector<std::byte> output;
  std::vector<int64_t> outputShape;
  std::vector<int64_t> receivedSplits;  // alltoall: rows received from each rank
  int lastJoinedRank = -1;
  int32_t processSetId = -1;  // a process set change: the set's id

  // Marks the operation ended, wakes waiters, then runs the callback (outside the lock, on
  // the calling thread).
  void complete(const Status& outcome);
};

// One unit (a tensor, or a grouped allreduce) of this rank, from enqueue to completion.
struct Entry {
  Request request;
  std::string key;  // request.key(), made once (at enqueue, off the coordinator thread)
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  // Device tensors: events after the work that produced them (one per stream given).
  std::vector<DeviceEvent> ready;
  std::shared_ptr<OperationState> state;
  Clock::time_point enqueued, requested, responded;
};

// Entries waiting for the coordinator. Thread safety: every member may be called from any
// thread.
class Queue {
 public:
  explicit Queue(int rank) : rank_(rank) {}
  // Accepts the entry (ok), or returns why not (a name in flight, or the queue is closed).
  Status push(std::unique_ptr<Entry> entry);
  // Why push would refuse an entry of these names in set `set` now because one of them is in
  // flight (InvalidArgumentError: the one in-flight check and its message), or ok.
  Status inFlight(const std::vector<std::string>& names, int32_t set) const;
  // Accepts a join (ok), or returns why not.
  Status pushJoin(std::shared_ptr<OperationState> state);
  // Takes what was pushed since the last call; `join` is set when a join is new.
  std::vector<std::unique_ptr<Entry>> drain(bool& join);
  // The join being negotiated (null if none); clears it.
  std::shared_ptr<OperationState> takeJoin();
  // The request's names (in its process set) are no longer in flight (may be enqueued again).
  void release(const Request& request);
  // The same for several entries under one lock (a fused group's, as it completes).
  void release(const std::vector<std::unique_ptr<Entry>>& entries);

  void requestShutdown();
  bool shutdownRequested();
  // Sleeps until `deadline`, a shutdown request, or a push to an idle rank (below).
  void sleepUntil(Clock::time_point deadline);
  // Nothing in flight on this rank and no join: its next push wakes the coordinator.
  bool idle() const;
  // Refuses every later push with `why`; returns the entries and join not yet drained.
  std::vector<std::unique_ptr<Entry>> close(const Status& why,
                                            std::shared_ptr<OperationState>& join);

 private:
  // Under mutex_: push's checks and queueing; `wake` when the coordinator should wake now.
  Status admit(std::unique_ptr<Entry> entry, bool& wake);
  // Under mutex_: the refusal of the first of `names` in flight in `set`, or ok.
  Status findInFlight(const std::vector<std::string>& names, int32_t set) const;
  // The refusal of an operation named `name` while one of that name is in flight.
  Status refusal(const std::string& name) const;
  // Under mutex_: the request's names leave the in-flight set; `key` is its Entry::key ("" if
  // not at hand), the in-flight key of a one-name unit.
  void forget(const Request& request, const std::string& key);

  const int rank_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Entry>> incoming_;
  // The names in flight on this rank, each under its unit key (unitKey({name}, set)): the
  // runtime's one record of them.
  std::unordered_set<std::string> inFlight_;
  std::shared_ptr<OperationState> join_;
  bool joinNew_ = false;
  bool shutdown_ = false;
  // Set by a push while nothing was in flight on this rank: a lone call on an idle rank is
  // negotiated at once instead of a cycle later. Pushes while work is in flight (a step's
  // burst after its first tensor) leave the cycle's pace alone, so they still fuse.
  bool idleWake_ = false;
  Status closed_;  // ok while open
};

}  // namespace cerar
