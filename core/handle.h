// The handle of one asynchronous operation (core/runtime.h returns them).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace cerar {

struct OperationState;

// The handle of one asynchronous operation. Copyable; all copies refer to one operation.
// Thread safety: every member may be called from any thread.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<OperationState> state);
  // True once the operation has ended, successfully or not.
  bool poll() const;
  // Blocks until the operation ends; throws the cerar::Error subclass of its status's code
  // (common/error.h): TimeoutError, PeerLostError, MismatchError, ShutDownError, ...
  void wait() const;
  // Like wait() with a limit; returns false if the operation is still running.
  bool waitFor(std::chrono::milliseconds limit) const;
  // allgather: the gathered bytes (ranks in order) and their shape; valid after wait().
  const std::vector<std::byte>& output() const;
  const std::vector<int64_t>& outputShape() const;
  // alltoall: the rows received from each rank, in rank order; grouped allgather: the rows of
  // every rank and tensor; valid after wait().
  const std::vector<int64_t>& receivedSplits() const;
  // join: the rank that joined last; valid after wait().
  int lastJoinedRank() const;
  // addProcessSet: the new set's id; valid after wait().
  int32_t processSetId() const;

 private:
  std::shared_ptr<OperationState> state_;
};

}  // namespace cerar
