// Runs negotiated units on this rank: packs an allreduce fusion group into the persistent
// fusion buffer (host memory, or device memory for CUDA tensors), selects the algorithm,
// reduces, unpacks; reducescatter (fused the same way), alltoall, allgather, broadcast and
// barrier (those in dispatch_collectives.cc; the all-reduce's steps in allreduce_pipeline.*).
// Owned and called by the coordinator thread only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/device/device.h"
#include "core/policy/error_calibration.h"
#include "core/execution/error_feedback.h"
#include "core/control/operation.h"
#include "core/control/process_sets.h"
#include "core/runtime_stats.h"
#include "core/policy/selection.h"
#include "core/execution/timeline.h"
#include "ops/adasum_run.h"
#include "ops/communicator.h"
#include "ops/hierarchical.h"
#include "ops/transport/timed.h"

namespace cerar {

class DeviceMark;

// A fusion group left running on the device. Once `mark` is reached, `finish` adds what it
// ran to the stats (and the timeline), then its handles may complete. Null mark: the group
// is done and counted.
struct DeviceUnit {
  std::shared_ptr<DeviceMark> mark;
  std::function<void(RuntimeStats&)> finish;
};

class Dispatcher {
 public:
  Dispatcher(std::shared_ptr<Transport> transport, Timeline& timeline, DeviceSlot& devices);

  // Runs one fusion group as the coordinator rank decided it (`decision`: the algorithm and
  // its parameters; nothing is re-derived here). entries[i] is this rank's entry of units[i],
  // or null when this rank has joined and contributes the op's identity. Results are written to the entries'
  // outputs (allgather: to the state); completing the handles is the caller's. Transport
  // failures propagate (the runtime cannot continue after them).
  // For device tensors, returns as soon as the work is enqueued on devices.get(-1)'s queue,
  // with the mark after which the results are in place (DeviceUnit).
  // `set` is the units' process set, which has this rank: its ranks are numbered 0..n-1 in
  // every schedule (a view of the job's links; broadcast roots are global ranks).
  DeviceUnit run(const std::vector<const Response*>& units, const std::vector<Entry*>& entries,
                 const FusedGroup& decision, RuntimeStats& stats, const ProcessSet& set);
  // In set 0 (every rank of the transport).
  DeviceUnit run(const std::vector<const Response*>& units, const std::vector<Entry*>& entries,
                 const FusedGroup& decision, RuntimeStats& stats);
  // Set `id` is gone: drops its view of the links.
  void forget(int32_t id) { groups_.erase(id); }
  // How every group's host runs stream (from the probed links, the same on every rank).
  void setPacing(const Pacing& pacing);
  // What budgeted decisions' predicted errors are (CERAR_ERROR_BOUND, job-wide).
  void setErrorBound(ErrorBound bound) { errorBound_ = bound; }
  // A layered job's levels (core/config/bootstrap.h, JobLinks): set 0's host sums decided
  // host by host run over them.
  void setHostLevels(std::shared_ptr<Transport> local, std::shared_ptr<Transport> cross);
  // Whether lossy wires' losses are fed back (CERAR_ERROR_FEEDBACK, job-wide).
  void setErrorFeedback(bool on) { errorFeedback_ = on; }

 private:
  // The operation's timeline event on each tensor's row: from its response (a joined rank's
  // share: from the dispatch) to the end given to recordOperation.
  struct OperationRows {
    std::string activity;
    std::vector<std::pair<std::string, Clock::time_point>> starts;
  };
  OperationRows operationRows(const std::vector<const Response*>& units,
                              const std::vector<Entry*>& entries) const;
  void recordOperation(const OperationRows& rows, Clock::time_point end, const JsonObject& args);

  // A fused all-reduce (dispatch_allreduce.cc): built once from the decision (what it runs
  // with), then run on a device or the host, each of which accounts for what ran.
  struct AllreduceRun;
  DeviceUnit allreduce(const std::vector<const Response*>& units,
                       const std::vector<Entry*>& entries, const FusedGroup& decision,
                       RuntimeStats& stats, OperationRows rows);
  AllreduceRun buildAllreduce(const std::vector<const Response*>& units,
                              const std::vector<Entry*>& entries, const FusedGroup& decision,
                              RuntimeStats& stats);
  DeviceUnit allreduceOnDevice(AllreduceRun run, OperationRows rows, RuntimeStats& stats);
  void allreduceOnHost(AllreduceRun& run, const std::vector<const Response*>& units,
                       const OperationRows& rows, RuntimeStats& stats);
  // Debug error mode: the measured error's timeline arguments, where the run allows one.
  JsonObject measuredArgs(const AllreduceRun& run, const RunStats& ran, RuntimeStats& stats);
  // Debug error mode: the exact ring on `exactCopy_` (the input, on the host), compared with
  // `result` (host memory); returns the timeline arguments.
  JsonObject measureError(const std::byte* result, size_t total, DType dtype,
                          const AllreduceOptions& options, RuntimeStats& stats);
  // A fused group of reducescatter units: packed rank-major (every tensor's rows for rank 0,
  // then for rank 1, ...) so that rank i's share is one chunk, reduced by the exact ring's
  // reduce-scatter plan, and this rank's chunk unpacked into the outputs. Device tensors are
  // staged through host memory.
  // Each returns the operation's timeline args.
  JsonObject reducescatter(const std::vector<const Response*>& units,
                           const std::vector<Entry*>& entries, RuntimeStats& stats);
  JsonObject alltoall(const Response& unit, Entry* entry, RuntimeStats& stats);
  // A fused group of allgather units (each of one or more tensors): every rank's rows of
  // every tensor in one ring allgather, then each unit's output assembled tensor by tensor.
  JsonObject allgather(const std::vector<const Response*>& units,
                       const std::vector<Entry*>& entries, RuntimeStats& stats);
  JsonObject broadcast(const Response& unit, Entry* entry, RuntimeStats& stats);
  // Timeline events of one activity for every tensor of the group.
  void record(const std::vector<const Response*>& units, const std::string& activity,
              Clock::time_point start, Clock::time_point end, const JsonObject& args = {});

  // One process set's view of the links (the job's transport itself for set 0), over a
  // channel of its own where the transport has channels.
  struct Group {
    std::shared_ptr<Transport> transport;
    Communicator communicator;
    explicit Group(std::shared_ptr<Transport> t) : transport(t), communicator(std::move(t)) {}
  };
  Group& groupFor(const ProcessSet& set);

  // This rank's time blocked on its peers on every link the dispatcher runs collectives over
  // (RuntimeStats::transportWait); declared before the transports that add to it.
  std::shared_ptr<WaitClock> waits_ = std::make_shared<WaitClock>();
  std::shared_ptr<Transport> base_;  // the job's links, timed
  std::map<int32_t, std::unique_ptr<Group>> groups_;
  Pacing pacing_;
  ErrorBound errorBound_ = ErrorBound::kCalibrated;
  bool errorFeedback_ = false;
  ErrorFeedback feedback_;
  std::vector<float> lost_;  // a buffer's losses, kept for feedback_
  Group* group_ = nullptr;        // the set of the group being run
  const ProcessSet* set_ = nullptr;
  AdasumRunner adasum_;
  std::unique_ptr<HierarchicalAllreduce> hierarchy_;  // a layered job's, else null
  Timeline& timeline_;
  DeviceSlot& devices_;
  std::vector<std::byte> fusion_;  // grows to the largest group, then reused
  std::vector<std::byte> gathered_;  // the same for allgather groups
  std::vector<std::byte> exactCopy_;  // debug error mode: the input reduced by the exact ring
  std::vector<std::byte> staged_;     // debug error mode: the result
};

// The engine's reduction of a user-level op (average reduces as a sum).
ReduceOp reduceOpOf(Op op);

}  // namespace cerar
