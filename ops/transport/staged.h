// Device buffers over any host transport, staged through pinned host memory ("Gloo fallback
// for device tensors": the all-reduce still runs its kernels on the device).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ops/transport/device_transport.h"

namespace cerar {

// postSend copies device -> pinned on stream(), waits for that copy (with the inner
// transport's timeout), then posts the pinned bytes on the inner transport. postRecv posts a
// pinned block; waitRecv waits on the inner transport, then enqueues pinned -> device on
// stream(), so later work on stream() sees the bytes without a host wait. Pinned blocks
// (cudaMallocHost) are pooled and reused once their last copy has completed.
// Errors of the inner transport pass through unchanged; a CUDA error throws Error naming this
// rank and makes every later call throw at once.
class StagedTransport : public DeviceTransport {
 public:
  // `device`: the CUDA device of the buffers; the transport makes its own stream there.
  // `inner` may be shared (the runtime's links): this transport is its only driver while
  // alive.
  StagedTransport(std::shared_ptr<Transport> inner, int device);
  ~StagedTransport() override;
  StagedTransport(const StagedTransport&) = delete;
  StagedTransport& operator=(const StagedTransport&) = delete;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Duration timeout() const override { return inner_->timeout(); }
  void* stream() const override { return stream_; }
  bool waitEvent(void* event, Duration timeout) override;
  Transport& inner() { return *inner_; }

  void postSend(int peer, const void* data, size_t bytes) override;
  void postRecv(int peer, void* data, size_t bytes) override;
  void waitSend(int peer) override;
  void waitRecv(int peer) override;

  // Pinned bytes held by the pool (for tests and logs).
  size_t pinnedBytes() const;

 private:
  struct Block {
    void* host = nullptr;
    size_t capacity = 0;
    void* event = nullptr;  // cudaEvent_t after the last copy that reads or writes `host`
  };
  struct Pending {
    Block* block;
    void* device;  // receives: where the bytes go at waitRecv
    size_t bytes;
  };
  Block* acquire(size_t bytes);
  void release(Block* block) { free_.push_back(block); }
  void checkUsable() const;
  void cuda(int status, const char* what, int peer);

  int device_;
  void* stream_ = nullptr;
  std::vector<std::unique_ptr<Block>> blocks_;  // every block, owned
  std::vector<Block*> free_;
  std::vector<std::deque<Pending>> sends_, recvs_;  // per peer, oldest first
  std::string failure_;
  std::shared_ptr<Transport> inner_;  // reset first in the destructor, before the pinned memory
};

}  // namespace cerar
