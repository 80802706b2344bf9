// The control tree: the ranks of a job as a tree of bounded degree rooted at the coordinator
// rank (0), over which every negotiation cycle travels (up: the ranks' reports, merged at each
// rank; down: the coordinator's answer). A rank handles one message with its parent and one
// with each of at most `fanout` children per direction, whatever the job's size. Pure.
#pragma once

#include <vector>

namespace cerar {

// CERAR_CONTROL_FANOUT's default, and the fanout of the few collectives at start that run
// before or apart from the negotiation (the link probe's, the blame scope's).
constexpr int kDefaultControlFanout = 8;

struct ControlTree {
  int rank = 0;
  int size = 1;
  int fanout = kDefaultControlFanout;  // children per rank at most (>= 1; 1 makes a chain)

  // -1 for the root.
  int parent() const { return rank == 0 ? -1 : (rank - 1) / fanout; }
  // In ascending order: fanout*rank+1 .. fanout*rank+fanout, those below size.
  std::vector<int> children() const;
  // Hops from the root to the deepest rank (0 for one rank).
  int depth() const;
};

}  // namespace cerar
