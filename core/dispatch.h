// Runs negotiated units on this rank: packs an allreduce fusion group into the persistent
// fusion buffer (host memory, or device memory for CUDA tensors), selects the algorithm,
// reduces, unpacks; reducescatter (fused the same way), alltoall, allgather, broadcast and
// barrier. Owned and called by the coordinator
// thread only.
#pragma once

#include <memory>
#include <vector>

#include "core/device.h"
#include "core/operation.h"
#include "core/selection.h"
#include "core/timeline.h"
#include "ops/adasum_run.h"
#include "ops/communicator.h"

namespace cerar {

class Dispatcher {
 public:
  Dispatcher(std::shared_ptr<Transport> transport, Timeline& timeline, DeviceSlot& devices);

  // Runs one fusion group as the coordinator rank decided it (`decision`: the algorithm and
  // its parameters; nothing is re-derived here). entries[i] is this rank's entry of units[i],
  // or null when this rank has joined and contributes the op's identity. Results are written to the entries'
  // outputs (allgather: to the state); completing the handles is the caller's. Transport
  // failures propagate (the runtime cannot continue after them).
  // Returns null when the results are in place, or, for device tensors, the event after which
  // they are (the work is enqueued on the runtime stream of devices.get(-1)).
  DeviceEvent run(const std::vector<const Response*>& units, const std::vector<Entry*>& entries,
                  const FusedGroup& decision, RuntimeStats& stats);

 private:
  DeviceEvent allreduce(const std::vector<const Response*>& units,
                        const std::vector<Entry*>& entries, const FusedGroup& decision,
                        RuntimeStats& stats);
  // The fusion group on the device: the same steps as on the host, as device work.
  DeviceEvent deviceAllreduce(const std::vector<const Response*>& units,
                              const std::vector<Entry*>& entries, size_t total,
                              const AllreduceOptions& options, bool measure, RunStats& run,
                              std::string& errorArgs, RuntimeStats& stats);
  // Debug error mode: the exact ring on `exactCopy_` (the input, on the host), compared with
  // `result` (host memory); returns the timeline arguments.
  std::string measureError(const std::byte* result, size_t total, DType dtype,
                           const AllreduceOptions& options, RuntimeStats& stats);
  // A fused group of reducescatter units: packed rank-major (every tensor's rows for rank 0,
  // then for rank 1, ...) so that rank i's share is one chunk, reduced by the exact ring's
  // reduce-scatter plan, and this rank's chunk unpacked into the outputs. Device tensors are
  // staged through host memory.
  void reducescatter(const std::vector<const Response*>& units,
                     const std::vector<Entry*>& entries, RuntimeStats& stats);
  void alltoall(const Response& unit, Entry* entry, RuntimeStats& stats);
  // A fused group of allgather units (each of one or more tensors): every rank's rows of
  // every tensor in one ring allgather, then each unit's output assembled tensor by tensor.
  void allgather(const std::vector<const Response*>& units, const std::vector<Entry*>& entries,
                 RuntimeStats& stats);
  void broadcast(const Response& unit, Entry* entry, RuntimeStats& stats);
  // Timeline events of one phase for every tensor of the group.
  void record(const std::vector<const Response*>& units, const char* phase,
              Clock::time_point start, Clock::time_point end, const std::string& args = "");

  std::shared_ptr<Transport> transport_;
  Communicator communicator_;
  AdasumRunner adasum_;
  Timeline& timeline_;
  DeviceSlot& devices_;
  std::vector<std::byte> fusion_;  // grows to the largest group, then reused
  std::vector<std::byte> gathered_;  // the same for allgather groups
  std::vector<std::byte> exactCopy_;  // debug error mode: the input reduced by the exact ring
  std::vector<std::byte> staged_;     // debug error mode on the device: the result
};

// The engine's reduction of a user-level op (average reduces as a sum).
ReduceOp reduceOpOf(Op op);

}  // namespace cerar
