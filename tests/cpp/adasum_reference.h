// The Adasum rule written out plainly, as a pair tree over whole vectors, tensor by tensor, in
// fp64: the specification the schedule and the runtime must meet (tests only; shares no code
// with ops/algorithms/adasum.*).
#pragma once

#include <vector>

namespace cerar::testing {

// v[rank] is each rank's buffer, tensors of `sizes` elements packed back to back.
inline std::vector<double> referenceAdasum(std::vector<std::vector<double>> v,
                                           const std::vector<size_t>& sizes) {
  for (size_t D = 1; D < v.size(); D *= 2) {
    for (size_t g = 0; g < v.size(); g += 2 * D) {
      std::vector<double>& a = v[g];
      const std::vector<double>& b = v[g + D];
      size_t start = 0;
      for (size_t n : sizes) {
        double dot = 0, aa = 0, bb = 0;
        for (size_t e = start; e < start + n; ++e) {
          dot += a[e] * b[e];
          aa += a[e] * a[e];
          bb += b[e] * b[e];
        }
        const double ca = aa > 0 ? 1 - dot / (2 * aa) : 1;
        const double cb = bb > 0 ? 1 - dot / (2 * bb) : 1;
        for (size_t e = start; e < start + n; ++e) a[e] = ca * a[e] + cb * b[e];
        start += n;
      }
    }
  }
  return v[0];
}

}  // namespace cerar::testing
