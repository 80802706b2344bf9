// The hierarchical all-reduce of ranks spread over hosts: a reduce-scatter inside each host
// (the exact ring on the host's links: shared memory where the host has it), an all-reduce of
// each local rank's slice across hosts among the ranks of the same local rank (any of the
// all-reduce's choices: the exact ring, CERAR, a lossy wire), then an all-gather inside each
// host. Each host's link carries 2(H-1)/H of the buffer for the exact ring instead of the flat
// ring's 2(N-1)/N, and CERAR's rounds and error follow the H hosts, not the N ranks.
// Every rank ends with the same bits: every slice is reduced once, in one order, and copied.
#pragma once

#include <memory>
#include <vector>

#include "ops/communicator.h"

namespace cerar {

// The slice lengths of `count` elements over `localSize` ranks: as even as can be, the longer
// ones first (the local reduce-scatter's chunks; local rank i reduces across hosts the i-th).
std::vector<size_t> hierarchicalSlices(size_t count, int localSize);

class HierarchicalAllreduce {
 public:
  // `local`: this rank's host (its ranks in rank order); `cross`: the ranks of this rank's
  // local rank, one per host, in host order. Every host has as many ranks.
  HierarchicalAllreduce(std::shared_ptr<Transport> local, std::shared_ptr<Transport> cross);

  int hosts() const { return cross_.size(); }
  int localSize() const { return local_.size(); }
  void setPacing(const Pacing& pacing);

  // As Communicator::allreduce, `options` applying to the step across hosts (its c a multiple
  // of the hosts). options.lost: `count` floats, the slice's losses in place, zeros elsewhere.
  RunStats allreduce(void* data, size_t count, DType dtype, const AllreduceOptions& options);

 private:
  Communicator local_;
  Communicator cross_;
  std::shared_ptr<Transport> localLinks_;
};

}  // namespace cerar
