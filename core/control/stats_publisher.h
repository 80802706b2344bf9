// The coordinator thread's counters and the copy that any thread reads (Runtime::stats()).
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <vector>

#include "core/runtime_stats.h"

namespace cerar {

class StatsPublisher {
 public:
  // The coordinator thread's counters, published by publish().
  RuntimeStats& working() { return working_; }
  // Makes the working counters what published() returns.
  void publish();
  // Work that ends off the coordinator thread (device completion): counted in the published
  // copy at once, and in the working counters at the next publish().
  void countLate(std::function<void(RuntimeStats&)> count);
  // A consistent copy; any thread.
  RuntimeStats published() const;

 private:
  RuntimeStats working_;
  mutable std::mutex mutex_;
  RuntimeStats published_;
  std::vector<std::function<void(RuntimeStats&)>> late_;  // for working_, under mutex_
};

// One control message of `messageBytes` bytes sent or received, with its frame.
void countControl(RuntimeStats& stats, size_t messageBytes, bool sent);

}  // namespace cerar
