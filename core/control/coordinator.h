// The coordinator thread's work, every cycle on every rank: report newly ready units to the
// coordinator rank (0), receive one ordered answer, and run it — so every rank runs the same
// collectives in the same order, whatever order and threads they were enqueued from.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/control/blame.h"
#include "ops/control_tree.h"
#include "core/policy/coordinator_tuning.h"
#include "core/execution/dispatch.h"
#include "core/device/finalizer.h"
#include "core/log.h"
#include "core/control/held_units.h"
#include "core/control/negotiation.h"
#include "core/control/operation.h"
#include "core/control/pending.h"
#include "core/control/response_cache.h"
#include "core/config/runtime_config.h"
#include "core/runtime_stats.h"
#include "core/control/stall_inspector.h"
#include "core/control/stats_publisher.h"

namespace cerar {

// When a rank's next cycle starts (it may start earlier: a push to an idle rank wakes it).
struct CycleTimes {
  Clock::time_point start;  // the cycle just run began
  Clock::time_point next;   // when the pace had it end
  Clock::duration cycle;    // the pace (the cycle time, slower while the job is idle)
  Clock::time_point now;    // after the cycle's work
  bool idleAfterWork;       // it ran work and left nothing in flight on this rank
};
// A late cycle does not cause a burst; one woken early keeps the pace's next cycle, so the
// rest of a step's tensors do not wait longer, but never one further than a cycle away (the
// pace may have just quickened). After work that left the rank idle, the next cycle waits for
// the rank's next call, up to a cycle: at once it would carry nothing from this rank, and a
// call made just after would wait for the cycle after it (a synchronous loop of one tensor).
Clock::time_point nextCycleStart(const CycleTimes& t);

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
  // Where a failure is posted so that survivors agree on a lost rank (core/control/blame.h). Every
  // rank calls it before run(), all with a board or all without: rank 0 picks the scope.
  // A layered job's levels, for set 0's host-by-host all-reduces (Dispatcher::setHostLevels).
  // Before probe(), which then also times the local step.
  void setHostLevels(std::shared_ptr<Transport> local, std::shared_ptr<Transport> cross) {
    local_ = local;
    dispatcher_.setHostLevels(std::move(local), std::move(cross));
  }
  void setBlameBoard(std::shared_ptr<BlameBoard> board, bool hostedByRankZero);
  // Runs cycles until a rank asks to shut down or the transport fails; then every operation
  // still pending on this rank fails with the reason, and later enqueues are refused.
  void run();
  // A copy of the counters; any thread.
  RuntimeStats stats() const { return stats_.published(); }
  // True on the thread that completes device operations (and runs their callbacks).
  bool onFinalizerThread() { return finalizer_.onThread(); }

 private:
  // This rank's report of the cycle: what it has newly submitted in full (or joined, or asked
  // to shut down) and the cached units it holds.
  CycleReport collectReport();
  // The cycle's units, the cached ones in slot order, then the full responses; by reference
  // into the cache and `message`: valid until the next put.
  UnitRefs unitsOf(const ResponseMessage& message) const;
  ResponseMessage negotiate(CycleReport report);
  // Rank 0's part of negotiate: the answer to the job's merged report.
  std::vector<uint8_t> decide(const CycleReport& report);
  void process(const ResponseMessage& message);
  // Runs one fusion group of the cycle's units.
  // `entries`: this rank's entry of each unit (null where it has joined).
  void runGroup(const UnitRefs& units, const std::vector<Entry*>& entries,
                const FusedGroup& group);
  // Adds or removes a process set as `unit` says, alike on every rank (same order, same ids).
  void changeSets(const Response& unit);
  void farewell();
  void finish(const Status& why);

  RuntimeConfig config_;
  std::shared_ptr<Transport> transport_;
  std::shared_ptr<Transport> local_;  // a layered job's host level, else null
  Queue& queue_;
  ProcessSetTable& sets_;
  Timeline& timeline_;
  const Logger& logger_;
  ResponseCache cache_;
  ControlTree tree_;
  std::vector<int> children_;
  HeldUnits held_;        // this rank's cached units not yet answered
  bool joined_ = false;   // joined and not yet released
  bool rollCall_ = false;  // the last answer asked for a roll call
  uint64_t idleCycles_ = 0;   // rank 0: cycles in a row with nothing under way
  double rollCallAfter_ = 0;  // seconds a held unit waits before one (0: never)
  SelectionPolicy policy_;
  LinkModel link_;  // used on the coordinator rank only: it decides for every rank
  std::function<void()> beforeRelease_;
  std::unique_ptr<NegotiationTable> table_;  // rank 0 only
  StallInspector stallInspector_;
  Clock::time_point lastInspection_{};
  DeviceSlot& devices_;
  Dispatcher dispatcher_;
  PendingUnits pending_;
  StatsPublisher stats_;
  FusionTuning tuning_;
  std::shared_ptr<BlameBoard> board_;
  BlameOptions blame_;
  Finalizer finalizer_;  // last: its thread may still complete entries while members go
};

}  // namespace cerar
