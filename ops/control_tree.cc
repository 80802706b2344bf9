#include "ops/control_tree.h"

namespace cerar {

std::vector<int> ControlTree::children() const {
  std::vector<int> out;
  const long long first = (long long)fanout * rank + 1;
  for (long long child = first; child < first + fanout && child < size; ++child) {
    out.push_back(int(child));
  }
  return out;
}

int ControlTree::subtreeSize() const {
  // The subtree's ranks at each level form one contiguous range: [low, high].
  long long count = 0;
  for (long long low = rank, high = rank; low < size; low = low * fanout + 1,
                 high = high * fanout + fanout) {
    count += (high < size ? high : size - 1) - low + 1;
  }
  return int(count);
}

int ControlTree::depth() const {
  int levels = 0;
  for (long long last = 0; last < size - 1; last = last * fanout + fanout) ++levels;
  return levels;
}

bool treeNeighbours(int rank, int peer, int size, int fanout) {
  if (rank == peer || rank < 0 || peer < 0 || rank >= size || peer >= size) return false;
  return ControlTree{rank, size, fanout}.parent() == peer ||
         ControlTree{peer, size, fanout}.parent() == rank;
}

}  // namespace cerar
