#include "core/handle.h"

#include <mutex>

#include "core/control/operation.h"
#include "common/error.h"

namespace cerar {

Handle::Handle(std::shared_ptr<OperationState> state) : state_(std::move(state)) {}

namespace {
OperationState& stateOf(const std::shared_ptr<OperationState>& state) {
  if (!state) throw InvalidArgumentError("cerar: empty handle (not returned by an operation)");
  return *state;
}
}  // namespace

bool Handle::poll() const { return stateOf(state_).done.load(std::memory_order_acquire); }

void Handle::wait() const {
  auto& s = stateOf(state_);
  if (!s.done.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(s.mutex);
    s.ended.wait(lock, [&] { return s.done.load(std::memory_order_relaxed); });
  }
  if (!s.status.ok()) s.status.raise();
}

bool Handle::waitFor(std::chrono::milliseconds limit) const {
  auto& s = stateOf(state_);
  if (!s.done.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(s.mutex);
    if (!s.ended.wait_for(lock, limit, [&] { return s.done.load(std::memory_order_relaxed); })) {
      return false;
    }
  }
  if (!s.status.ok()) s.status.raise();
  return true;
}

const std::vector<std::byte>& Handle::output() const { return stateOf(state_).output; }
const std::vector<int64_t>& Handle::outputShape() const { return stateOf(state_).outputShape; }
const std::vector<int64_t>& Handle::receivedSplits() const {
  return stateOf(state_).receivedSplits;
}
int Handle::lastJoinedRank() const { return stateOf(state_).lastJoinedRank; }
int32_t Handle::processSetId() const { return stateOf(state_).processSetId; }

}  // namespace cerar
