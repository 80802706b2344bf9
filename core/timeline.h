// The timeline: a chrome://tracing JSON array of per-tensor phases (NEGOTIATE, WAIT,
// MEMCPY_IN, the collective, MEMCPY_OUT), one row per tensor. The file is a valid JSON array
// once stop() has run (also on destruction).
// Thread safety: every member may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

namespace cerar {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Timeline(int rank);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts writing to `path` (a running timeline is stopped first). Throws Error if it cannot.
  void start(const std::string& path);
  void stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // One complete event of `phase` on the row of `tensor`. `args` is the body of a JSON object
  // (e.g. "\"algorithm\": \"ring\""), or empty.
  void record(const std::string& tensor, const char* phase, Clock::time_point start,
              Clock::time_point end, const std::string& args = "");

 private:
  void write(const std::string& event);  // with mutex_ held

  int rank_;
  std::atomic<bool> active_{false};
  std::mutex mutex_;
  std::FILE* file_ = nullptr;
  bool first_ = true;
  Clock::time_point origin_;
  std::unordered_map<std::string, int> rows_;
};

// Escapes a string for a JSON string literal (without the quotes).
std::string jsonEscape(const std::string& text);

}  // namespace cerar
