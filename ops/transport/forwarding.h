// A transport that forwards every call to another: a wrapper overrides only what it watches
// or changes. Channels are not forwarded (a channel's transfers would bypass the wrapper): a
// wrapper that carries them wraps each itself.
#pragma once

#include <memory>
#include <utility>

#include "ops/transport/transport.h"

namespace cerar {

class ForwardingTransport : public Transport {
 public:
  explicit ForwardingTransport(std::shared_ptr<Transport> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Duration timeout() const override { return inner_->timeout(); }
  void postSend(int peer, const void* data, size_t bytes) override {
    inner_->postSend(peer, data, bytes);
  }
  void postRecv(int peer, void* data, size_t bytes) override {
    inner_->postRecv(peer, data, bytes);
  }
  void waitSend(int peer) override { inner_->waitSend(peer); }
  void waitRecv(int peer) override { inner_->waitRecv(peer); }
  bool registerMemory(void* base, size_t bytes) override {
    return inner_->registerMemory(base, bytes);
  }
  void releaseMemory(void* base) override { inner_->releaseMemory(base); }

 protected:
  std::shared_ptr<Transport> inner_;
};

}  // namespace cerar
