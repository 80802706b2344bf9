// The timeline: a chrome://tracing JSON array in Horovod's layout, so its readers and habits
// carry over. Each tensor is a "process" row named as Horovod names it (tensorRow); on it,
// complete events ("ph": "X") nest by time: NEGOTIATE_<OP>, then the operation <OP> holding QUEUE,
// MEMCPY_IN_FUSION_BUFFER, the collective (<ALGORITHM>_<OP>) and MEMCPY_OUT_FUSION_BUFFER.
// On rank 0, each rank's readiness tick (an event named "0", "1", ...). CYCLE_START marks
// ("ph": "i", global) when asked. cerar's own facts (algorithm, c, wire, predicted error, ...)
// are the events' args. The file is a valid JSON array from start() on: events are written in
// whole pieces, each followed by the closing bracket (docs/timeline.md). Events and their args
// are JsonObjects: no caller writes JSON by hand.
// Thread safety: every member of Timeline may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "core/control/message.h"

namespace cerar {

// A JSON object built member by member from typed values: keys and strings escaped, numbers
// written as a C++ stream writes them (doubles as %g), and the non-finite ones JSON lacks as the
// strings "inf", "-inf" and "nan".
class JsonObject {
 public:
  JsonObject& add(std::string_view key, std::string_view text);
  JsonObject& add(std::string_view key, const char* text) {
    return add(key, std::string_view(text));
  }
  JsonObject& add(std::string_view key, const std::string& text) {
    return add(key, std::string_view(text));
  }
  JsonObject& add(std::string_view key, bool flag);
  JsonObject& add(std::string_view key, double number);
  template <typename T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  JsonObject& add(std::string_view key, T number) {
    member(key);
    body_ += std::to_string(number);
    return *this;
  }
  JsonObject& add(std::string_view key, const JsonObject& object);  // nested
  // `more`'s members after these.
  JsonObject& merge(const JsonObject& more);

  bool empty() const { return body_.empty(); }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void quoted(std::string_view text);  // a JSON string
  void member(std::string_view key);   // the separator and `"key": `

  std::string body_;  // the members, without the braces
};

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Timeline(int rank);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts writing to `path` (a running timeline is stopped first); `markCycles`: markCycle()
  // writes its marks. Throws Error if the file cannot be written.
  void start(const std::string& path, bool markCycles = false);
  void stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // One complete event of `activity` on the row of `tensor`, with `args` unless empty.
  void record(const std::string& tensor, const std::string& activity, Clock::time_point start,
              Clock::time_point end, const JsonObject& args = {});
  // A CYCLE_START mark now, if start() asked for them.
  void markCycle();
  // Writes the events held back, with the array's closing bracket, at most every
  // kFlushInterval (and whenever kPendingBytes are held), so that the file is a valid JSON
  // array while the job runs; the next events overwrite the bracket.
  void flush();

  static constexpr std::chrono::milliseconds kFlushInterval{100};
  static constexpr size_t kPendingBytes = size_t(1) << 20;

 private:
  // With mutex_ held: an event into pending_; pending_ to the file.
  void write(const std::string& event);
  void spill();
  long micros(Clock::time_point t) const;

  int rank_;
  std::atomic<bool> active_{false};
  std::mutex mutex_;
  std::FILE* file_ = nullptr;
  bool markCycles_ = false;
  bool seekable_ = false;  // a pipe cannot take the closing bracket back
  bool first_ = true;
  std::string pending_;    // written since the last spill
  Clock::time_point origin_, flushed_;
  std::unordered_map<std::string, int> rows_;
};

// A tensor's row, named as Horovod's PyTorch layer names it: "<op>.<name>" ("allreduce.grad.w");
// a name already in that form (an unnamed call's "allreduce.noname.3") is kept.
std::string tensorRow(const Description& d, const std::string& name);
// Horovod's activity names. The operation: "ALLREDUCE" ("ADASUM" for an Adasum all-reduce),
// "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER", "BARRIER".
std::string operationActivity(const Description& d);
// "NEGOTIATE_" and the operation.
std::string negotiateActivity(const Description& d);
// The collective inside the operation, named by its algorithm as Horovod names it by its
// library: "RING_ALLREDUCE", "CERAR_ALLREDUCE", "CHAIN_BROADCAST", ...
std::string collectiveActivity(const std::string& algorithm, const Description& d);
inline constexpr const char* kQueueActivity = "QUEUE";
inline constexpr const char* kMemcpyInActivity = "MEMCPY_IN_FUSION_BUFFER";
inline constexpr const char* kMemcpyOutActivity = "MEMCPY_OUT_FUSION_BUFFER";
inline constexpr const char* kCycleStartMark = "CYCLE_START";

}  // namespace cerar
