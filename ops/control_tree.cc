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

int ControlTree::depth() const {
  int levels = 0;
  for (long long last = 0; last < size - 1; last = last * fanout + fanout) ++levels;
  return levels;
}

}  // namespace cerar
