// Quantiles of a benchmark's samples, by linear interpolation between the sorted values.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace cerar::bench {

inline double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * double(v.size() - 1);
  const size_t low = size_t(at);
  const size_t high = std::min(low + 1, v.size() - 1);
  return v[low] + (at - double(low)) * (v[high] - v[low]);
}

inline double median(const std::vector<double>& v) { return quantile(v, 0.5); }

}  // namespace cerar::bench
