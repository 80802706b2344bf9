// The one interface every collective talks to: asynchronous point-to-point byte transfers.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace cerar {

// Point-to-point transfers between the ranks of one group.
//
// Ordering: sends to one peer are matched with that peer's receives from this rank in posting
// order, and complete in posting order; the same holds for receives. Both ends must post the
// same byte counts in the same order (the plans guarantee it; a mismatch is an Error where the
// transport can see it). Zero-byte transfers must not be posted.
//
// Thread safety: one thread drives a Transport at a time (the executor). Buffers passed to a
// post must stay valid and untouched until the matching wait returns.
class Transport {
 public:
  using Duration = std::chrono::milliseconds;

  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Default limit for one wait; a wait that exceeds it throws TimeoutError naming the peer.
  virtual Duration timeout() const = 0;

  // Starts sending `bytes` bytes at `data` to `peer`; returns at once.
  virtual void postSend(int peer, const void* data, size_t bytes) = 0;
  // Starts receiving `bytes` bytes from `peer` into `data`; returns at once.
  virtual void postRecv(int peer, void* data, size_t bytes) = 0;
  // Waits for the oldest pending send to `peer` / receive from `peer`.
  virtual void waitSend(int peer) = 0;
  virtual void waitRecv(int peer) = 0;

  // A transport over the same links whose transfers are never matched with this one's (a tag
  // space of its own), or null where the transport has none; then only the order in which
  // both ends post keeps traffic apart. Not thread-safe against this transport's own use.
  virtual std::shared_ptr<Transport> channel(uint32_t /*tag*/) { return nullptr; }

  // Announces that the transfers until releaseMemory(base) will post parts of
  // [base, base + bytes), so that the transport can set the region up once instead of once per
  // transfer (Gloo: one UnboundBuffer, transfers by offset). Returns whether it did; only then
  // must releaseMemory follow, after every transfer in the region has been waited for. The
  // default keeps the per-transfer path.
  virtual bool registerMemory(void* /*base*/, size_t /*bytes*/) { return false; }
  virtual void releaseMemory(void* /*base*/) {}

  int next() const { return (rank() + 1) % size(); }
  int prev() const { return (rank() + size() - 1) % size(); }
};

// Transport::registerMemory for a scope.
class RegisteredMemory {
 public:
  RegisteredMemory(Transport& transport, void* base, size_t bytes)
      : transport_(transport), base_(transport.registerMemory(base, bytes) ? base : nullptr) {}
  ~RegisteredMemory() {
    if (base_ != nullptr) transport_.releaseMemory(base_);
  }
  RegisteredMemory(const RegisteredMemory&) = delete;
  RegisteredMemory& operator=(const RegisteredMemory&) = delete;

 private:
  Transport& transport_;
  void* base_;
};

}  // namespace cerar
