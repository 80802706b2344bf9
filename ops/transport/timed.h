// A transport that measures how long its driver is blocked on its peers: every waitRecv and
// waitSend of the wrapped transport (and of its channels) adds its duration to one shared
// clock. A rank waits there for a slower peer during a collective: for its data, or, upstream
// of it in a ring, for room to send to it once the links' buffers are full. The cost per wait
// is two steady-clock reads and one relaxed atomic add: no lock, no allocation. The clock is
// atomic because the executor may drive the links from a pipeline thread while the
// coordinator thread reads it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

#include "ops/transport/transport.h"

namespace cerar {

// Nanoseconds blocked in waits, summed over every transport that shares it.
struct WaitClock {
  std::atomic<uint64_t> nanos{0};
  uint64_t read() const { return nanos.load(std::memory_order_relaxed); }
};

class TimedTransport final : public Transport {
 public:
  TimedTransport(std::shared_ptr<Transport> base, std::shared_ptr<WaitClock> clock)
      : base_(std::move(base)), clock_(std::move(clock)) {}

  int rank() const override { return base_->rank(); }
  int size() const override { return base_->size(); }
  Duration timeout() const override { return base_->timeout(); }
  void postSend(int peer, const void* data, size_t bytes) override {
    base_->postSend(peer, data, bytes);
  }
  void postRecv(int peer, void* data, size_t bytes) override {
    base_->postRecv(peer, data, bytes);
  }
  void waitSend(int peer) override {
    const auto start = std::chrono::steady_clock::now();
    base_->waitSend(peer);  // a throw is not counted: the runtime stops after it anyway
    count(start);
  }
  void waitRecv(int peer) override {
    const auto start = std::chrono::steady_clock::now();
    base_->waitRecv(peer);
    count(start);
  }
  // A channel's waits are this rank's waits too: the same clock.
  std::shared_ptr<Transport> channel(uint32_t tag) override {
    std::shared_ptr<Transport> links = base_->channel(tag);
    return links ? std::make_shared<TimedTransport>(std::move(links), clock_) : nullptr;
  }
  bool registerMemory(void* base, size_t bytes) override {
    return base_->registerMemory(base, bytes);
  }
  void releaseMemory(void* base) override { base_->releaseMemory(base); }

 private:
  void count(std::chrono::steady_clock::time_point start) {
    const auto waited = std::chrono::steady_clock::now() - start;
    clock_->nanos.fetch_add(
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count()),
        std::memory_order_relaxed);
  }

  std::shared_ptr<Transport> base_;
  std::shared_ptr<WaitClock> clock_;
};

}  // namespace cerar
