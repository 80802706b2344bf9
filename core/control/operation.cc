#include "core/control/operation.h"

#include "common/error.h"

namespace cerar {

void OperationState::complete(const Status& outcome) {
  Callback run;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (done.load(std::memory_order_relaxed)) return;
    status = outcome;
    done.store(true, std::memory_order_release);
    run = std::move(callback);
  }
  ended.notify_all();
  if (run) run(outcome);
}

namespace {
// A name is in flight per process set (as in Horovod, where each set has its own queue), under
// its unit key (core/control/message.h); a one-name unit's is its Entry::key, made at enqueue
// outside the lock that every enqueue takes.
std::string inFlightKey(const std::string& name, int32_t set) { return unitKey({name}, set); }
}  // namespace

Status Queue::refusal(const std::string& name) const {
  return Status(StatusCode::kInvalidArgument,
                detail::concat("cerar: an operation named '", name,
                               "' is already in flight on rank ", rank_,
                               "; names must be unique among pending operations"));
}

Status Queue::findInFlight(const std::vector<std::string>& names, int32_t set) const {
  for (const auto& name : names) {
    if (inFlight_.count(inFlightKey(name, set))) return refusal(name);
  }
  return {};
}

Status Queue::inFlight(const std::vector<std::string>& names, int32_t set) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return findInFlight(names, set);
}

Status Queue::push(std::unique_ptr<Entry> entry) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const Status accepted = admit(std::move(entry), wake);
    if (!accepted.ok()) return accepted;
  }
  if (wake) wake_.notify_all();
  return {};
}

Status Queue::admit(std::unique_ptr<Entry> entry, bool& wake) {
  if (!closed_.ok()) return closed_;
  const bool idle = inFlight_.empty();
  const int32_t set = entry->request.description.processSet;
  // One name: its in-flight key is the unit's key, made at enqueue.
  if (entry->request.names.size() == 1 && !entry->key.empty()) {
    if (!inFlight_.insert(entry->key).second) return refusal(entry->request.names[0]);
  } else {
    const Status busy = findInFlight(entry->request.names, set);
    if (!busy.ok()) return busy;
    // Names repeated within one group are caught by enqueue's validation.
    for (const auto& name : entry->request.names) inFlight_.insert(inFlightKey(name, set));
  }
  incoming_.push_back(std::move(entry));
  wake = idle && !idleWake_;
  idleWake_ = idleWake_ || idle;
  return {};
}

Status Queue::pushJoin(std::shared_ptr<OperationState> state) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!closed_.ok()) return closed_;
    if (join_) {
      return Status(StatusCode::kInvalidArgument,
                    "cerar: this rank has already joined; wait for that join to complete");
    }
    join_ = std::move(state);
    joinNew_ = true;
    idleWake_ = true;  // as a push to an idle rank: the others may wait for it
  }
  wake_.notify_all();
  return {};
}

std::vector<std::unique_ptr<Entry>> Queue::drain(bool& join) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::unique_ptr<Entry>> out;
  out.reserve(incoming_.size());
  for (auto& entry : incoming_) out.push_back(std::move(entry));
  incoming_.clear();
  join = joinNew_;
  joinNew_ = false;
  return out;
}

std::shared_ptr<OperationState> Queue::takeJoin() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::move(join_);
}

void Queue::release(const Request& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  forget(request, "");
}

void Queue::release(const std::vector<std::unique_ptr<Entry>>& entries) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& entry : entries) forget(entry->request, entry->key);
}

void Queue::forget(const Request& request, const std::string& key) {
  if (request.names.size() == 1 && !key.empty()) {
    inFlight_.erase(key);
    return;
  }
  for (const auto& name : request.names) {
    inFlight_.erase(inFlightKey(name, request.description.processSet));
  }
}

void Queue::requestShutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_ = true;
  }
  wake_.notify_all();
}

bool Queue::shutdownRequested() {
  std::lock_guard<std::mutex> lock(mutex_);
  return shutdown_;
}

void Queue::sleepUntil(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait_until(lock, deadline, [&] { return shutdown_ || idleWake_; });
  idleWake_ = false;
}

bool Queue::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return inFlight_.empty() && !join_ && !shutdown_;
}

std::vector<std::unique_ptr<Entry>> Queue::close(const Status& why,
                                                 std::shared_ptr<OperationState>& join) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_.ok()) closed_ = why;
  std::vector<std::unique_ptr<Entry>> out;
  for (auto& entry : incoming_) out.push_back(std::move(entry));
  incoming_.clear();
  inFlight_.clear();
  join = std::move(join_);
  return out;
}

}  // namespace cerar
