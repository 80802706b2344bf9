// The coordinator thread's work, every cycle on every rank: report newly ready units to the
// coordinator rank (0), receive one ordered answer, and run it — so every rank runs the same
// collectives in the same order, whatever order and threads they were enqueued from.
#pragma once

#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/autotune.h"
#include "core/blame.h"
#include "core/dispatch.h"
#include "core/finalizer.h"
#include "core/log.h"
#include "core/negotiation.h"
#include "core/operation.h"
#include "core/response_cache.h"
#include "core/runtime_config.h"
#include "core/runtime_stats.h"
#include "core/stall_inspector.h"

namespace cerar {

class Coordinator {
 public:
  // `beforeRelease` runs on the coordinator rank once every rank has asked to shut down and
  // before any rank is let go (e.g. closing a rendezvous store it hosts, so that a rank that
  // starts again cannot reach the old one).
  // `sets`: this rank's process sets, changed here as negotiated changes are processed.
  Coordinator(const RuntimeConfig& config, std::shared_ptr<Transport> transport, Queue& queue,
              Timeline& timeline, const Logger& logger, DeviceSlot& devices,
              ProcessSetTable& sets, std::function<void()> beforeRelease = {});

  // Measures the links for the cost model (all ranks together). Call before run().
  void probe();
  // Where a failure is posted so that survivors agree on a lost rank (core/blame.h). Every
  // rank calls it before run(), all with a board or all without: rank 0 picks the scope.
  void setBlameBoard(std::shared_ptr<BlameBoard> board, bool hostedByRankZero);
  // Runs cycles until a rank asks to shut down or the transport fails; then every operation
  // still pending on this rank fails with the reason, and later enqueues are refused.
  void run();
  // A copy of the counters; any thread.
  RuntimeStats stats() const;
  // True on the thread that completes device operations (and runs their callbacks).
  bool onFinalizerThread() { return finalizer_.onThread(); }

 private:
  RequestMessage collectRequests();
  // The cycle's units: the cached ones in slot order, then the full responses.
  std::vector<Response> unitsOf(const ResponseMessage& message) const;
  ResponseMessage negotiate(const RequestMessage& request);
  // One control message of `messageBytes` bytes sent or received, in the stats.
  void countControl(size_t messageBytes, bool sent);
  void process(const ResponseMessage& message);
  void complete(const std::string& key, const Status& status);
  // Adds or removes a process set as `unit` says, alike on every rank (same order, same ids).
  void changeSets(const Response& unit);
  // Hands the group's entries to the finalizer, which completes them once the unit's mark is
  // reached, after counting it (countLate).
  void completeOnDevice(const std::vector<const Response*>& members, DeviceUnit unit);
  // Stats of work that ends off the coordinator thread: applied to what stats() returns at
  // once, and to working_ at the next publishStats().
  void countLate(std::function<void(RuntimeStats&)> count);
  // Autotuning: feeds the cycle's reduced units to the tuner (coordinator rank), and applies
  // the response's parameters on every rank (pace, stats, timeline).
  void feedTuner(const std::vector<Response>& units, const std::vector<FusedGroup>& groups);
  void applyTuning(const TuningState& tuning);
  void farewell();
  void finish(const Status& why);
  void publishStats();

  RuntimeConfig config_;
  std::shared_ptr<Transport> transport_;
  Queue& queue_;
  ProcessSetTable& sets_;
  Timeline& timeline_;
  const Logger& logger_;
  ResponseCache cache_;
  SelectionPolicy policy_;
  LinkModel link_;  // used on the coordinator rank only: it decides for every rank
  std::function<void()> beforeRelease_;
  std::unique_ptr<NegotiationTable> table_;  // rank 0 only
  StallInspector stallInspector_;
  Clock::time_point lastInspection_{};
  DeviceSlot& devices_;
  Dispatcher dispatcher_;
  std::unordered_map<std::string, std::unique_ptr<Entry>> pending_;  // by unit key
  RuntimeStats working_;  // the coordinator thread's
  mutable std::mutex statsMutex_;
  RuntimeStats published_;
  std::vector<std::function<void(RuntimeStats&)>> late_;  // for working_, under statsMutex_
  TuningState tuning_;   // the coordinator rank's while not autotuning
  std::unique_ptr<Autotuner> tuner_;  // coordinator rank with CERAR_AUTOTUNE only
  std::ofstream tuneLog_;              // CERAR_AUTOTUNE_LOG, coordinator rank only
  TuningState applied_;  // the last response's, on every rank
  Clock::time_point appliedSince_{};
  std::shared_ptr<BlameBoard> board_;
  BlameOptions blame_;
  Finalizer finalizer_;  // last: its thread may still complete entries while members go
};

}  // namespace cerar
