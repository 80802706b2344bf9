#include "core/fusion.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace cerar {

std::vector<std::vector<size_t>> planFusion(const std::vector<Response>& responses,
                                            size_t thresholdBytes) {
  using Key = std::tuple<DType, Op, bool, double, double>;
  struct Open {
    size_t group;
    size_t bytes;
  };
  std::vector<std::vector<size_t>> groups;
  std::map<Key, Open> open;  // the group of each key still being filled
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    const Description& d = r.description;
    const size_t bytes = d.bytes();
    const bool fusible = thresholdBytes > 0 && r.error.empty() && d.kind == Kind::kAllreduce &&
                         bytes <= thresholdBytes;
    if (!fusible) {
      groups.push_back({i});
      continue;
    }
    const Key key{d.dtype, d.op, r.reducedOnDevice(), d.prescale, d.postscale};
    auto it = open.find(key);
    if (it != open.end() && it->second.bytes + bytes <= thresholdBytes) {
      groups[it->second.group].push_back(i);
      it->second.bytes += bytes;
    } else {
      open[key] = Open{groups.size(), bytes};
      groups.push_back({i});
    }
  }
  return groups;  // already ordered by first index: groups are opened in response order
}

}  // namespace cerar
