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

#include "ops/transport/forwarding.h"

namespace cerar {

// Nanoseconds blocked in waits, summed over every transport that shares it.
struct WaitClock {
  std::atomic<uint64_t> nanos{0};
  uint64_t read() const { return nanos.load(std::memory_order_relaxed); }
};

class TimedTransport final : public ForwardingTransport {
 public:
  TimedTransport(std::shared_ptr<Transport> base, std::shared_ptr<WaitClock> clock)
      : ForwardingTransport(std::move(base)), clock_(std::move(clock)) {}

  void waitSend(int peer) override {
    const auto start = std::chrono::steady_clock::now();
    inner_->waitSend(peer);  // a throw is not counted: the runtime stops after it anyway
    count(start);
  }
  void waitRecv(int peer) override {
    const auto start = std::chrono::steady_clock::now();
    inner_->waitRecv(peer);
    count(start);
  }
  // A channel's waits are this rank's waits too: the same clock.
  std::shared_ptr<Transport> channel(uint32_t tag) override {
    std::shared_ptr<Transport> links = inner_->channel(tag);
    return links ? std::make_shared<TimedTransport>(std::move(links), clock_) : nullptr;
  }

 private:
  void count(std::chrono::steady_clock::time_point start) {
    const auto waited = std::chrono::steady_clock::now() - start;
    clock_->nanos.fetch_add(
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count()),
        std::memory_order_relaxed);
  }

  std::shared_ptr<WaitClock> clock_;
};

}  // namespace cerar
