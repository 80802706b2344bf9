// The hierarchical all-reduce of ranks spread over hosts: a reduce-scatter inside each host
// (the exact ring on the host's links: shared memory where the host has it; NCCL's own
// collectives for device buffers), an all-reduce of each local rank's slice across hosts among
// the ranks of the same local rank (any of the all-reduce's choices: the exact ring, CERAR, a
// lossy wire), then an all-gather inside each host. Each host's link carries 2(H-1)/H of the
// buffer for the exact ring instead of the flat ring's 2(N-1)/N, and CERAR's rounds and error
// follow the H hosts, not the N ranks.
// Every rank ends with the same bits: every slice is reduced once, in one order, and copied.
#pragma once

#include <memory>
#include <vector>

#include "ops/communicator.h"

namespace cerar {

// The slice lengths of `count` elements over `localSize` ranks: equal, the last one with the
// rest (NCCL's reduce-scatter takes equal slices; the rest goes to the last rank by a reduce).
// Local rank i reduces the i-th across hosts.
std::vector<size_t> hierarchicalSlices(size_t count, int localSize);

// One host's own step, in place on the buffer's slices (hierarchicalSlices): collective among
// the host's ranks. Thread safety: one operation at a time.
class HostLevel {
 public:
  virtual ~HostLevel() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void setPacing(const Pacing&) {}
  // Afterwards this rank's slice holds the host's reduction of it; the others are scratch.
  virtual RunStats reduceScatter(void* data, const std::vector<size_t>& slices, DType dtype,
                                 ReduceOp op) = 0;
  // Afterwards every slice holds what its rank had.
  virtual RunStats allGather(void* data, const std::vector<size_t>& slices, DType dtype) = 0;
};

// Whether `mine` holds on every rank of a layered job, agreed by all: over the host's links,
// then across hosts (each host has a rank of every local rank, so every rank hears every host).
bool everyRankAgrees(bool mine, const std::shared_ptr<Transport>& local,
                     const std::shared_ptr<Transport>& cross);

// What a ring all-gather (or reduce-scatter) of `slices` moves at `rank`: every block but the
// next rank's sent, all but its own received, in size - 1 rounds.
RunStats ringLevelFigures(const std::vector<size_t>& slices, int rank, DType dtype);

// The exact ring's reduce-scatter and all-gather over the host's links (host memory).
std::shared_ptr<HostLevel> ringHostLevel(std::shared_ptr<Transport> local);

class HierarchicalAllreduce {
 public:
  // `local`: this rank's host (its ranks in rank order); `cross`: the ranks of this rank's
  // local rank, one per host, in host order. Every host has as many ranks. Host memory.
  HierarchicalAllreduce(std::shared_ptr<Transport> local, std::shared_ptr<Transport> cross);
  // Any level and any step across hosts (a device runner's communicator).
  HierarchicalAllreduce(std::shared_ptr<HostLevel> local, std::unique_ptr<Communicator> cross);

  int hosts() const { return cross_->size(); }
  int localSize() const { return local_->size(); }
  void setPacing(const Pacing& pacing);

  // As Communicator::allreduce, `options` applying to the step across hosts (its c a multiple
  // of the hosts). options.lost: `count` floats, the slice's losses in place, zeros elsewhere.
  RunStats allreduce(void* data, size_t count, DType dtype, const AllreduceOptions& options);

 private:
  std::shared_ptr<HostLevel> local_;
  std::unique_ptr<Communicator> cross_;
};

}  // namespace cerar
