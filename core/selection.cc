#include "core/selection.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace cerar {

namespace {

double roundSeconds(double messageBytes, const LinkModel& link) {
  return link.alpha + streamedRoundBytes(messageBytes, link) * (link.beta + link.gamma);
}

}  // namespace

// The link stays busy only while a segment waits behind the one in flight; with m <= segment
// the next round cannot start before this one has crossed.
double streamedRoundBytes(double m, const LinkModel& link) {
  if (link.segmentBytes <= 0) return m;
  return std::max(m, 2 * std::min(m, link.segmentBytes));
}

double ringSeconds(int N, double bytes, const LinkModel& link) {
  if (N <= 1) return 0;
  return 2.0 * (N - 1) * roundSeconds(bytes / N, link);
}

double cerarSeconds(int N, int c, double bytes, const LinkModel& link) {
  if (N <= 1) return 0;
  return (c + N - 2) * roundSeconds(bytes / c, link);
}

int bestComponents(int N, double bytes, size_t elements, const LinkModel& link) {
  if (N <= 2) return N;
  const double perByte = link.beta + link.gamma;
  const double seg = link.segmentBytes;
  // More components than elements only adds empty rounds.
  const double maxR = std::max(1.0, std::floor(double(elements) / N));
  // T(c) is piecewise (streamedRoundBytes): alpha-beta with messages of at least two segments, flat
  // per round between one and two, alpha-beta with twice the bytes below one. Its minimum is
  // at a branch's sqrt((N-2) d b / alpha) or at a breakpoint d/(2 seg), d/seg.
  std::vector<double> ideal;
  const auto sqrtOptimum = [&](double factor) {
    return link.alpha > 0 ? std::sqrt(factor * (N - 2) * bytes * perByte / link.alpha)
                          : double(elements);
  };
  ideal.push_back(sqrtOptimum(1));
  if (seg > 0) {
    ideal.push_back(sqrtOptimum(2));
    ideal.push_back(bytes / (2 * seg));
    ideal.push_back(bytes / seg);
  }
  int best = N;
  double bestSeconds = cerarSeconds(N, N, bytes, link);
  for (double x : ideal) {
    for (double r : {std::floor(x / N), std::ceil(x / N)}) {
      const int c = static_cast<int>(std::clamp(r, 1.0, maxR)) * N;
      const double seconds = cerarSeconds(N, c, bytes, link);
      if (seconds < bestSeconds || (seconds == bestSeconds && c < best)) {
        best = c;
        bestSeconds = seconds;
      }
    }
  }
  return best;
}

int scaledComponents(int N, int best, double scale, size_t elements) {
  if (scale == 1.0 || N <= 2) return best;
  const double maxR = std::max(1.0, std::floor(double(elements) / N));
  const double r = std::clamp(std::round(best * scale / N), 1.0, maxR);
  return static_cast<int>(r) * N;
}

Selection selectAlgorithm(int N, DType dtype, ReduceOp op, size_t elements,
                          const LinkModel& link, const SelectionPolicy& policy) {
  const double bytes = double(elements) * dtypeSize(dtype);
  Selection ring{Algorithm::kRing, N, 0, ringSeconds(N, bytes, link)};
  const bool cerarCan = N >= 2 && op == ReduceOp::kSum && isCerarDType(dtype);
  if (!cerarCan || policy.algorithm == "ring") return ring;
  const bool forced = policy.algorithm == "cerar";
  if (!forced && (N <= 2 || bytes < double(policy.minCerarBytes))) return ring;

  const int c = policy.components > 0
                    ? policy.components
                    : scaledComponents(N, bestComponents(N, bytes, elements, link),
                                       policy.componentsScale, elements);
  Selection cerar{Algorithm::kCerar, c, policy.eps > 0 ? policy.eps : defaultEps(dtype),
                  cerarSeconds(N, c, bytes, link)};
  if (forced) return cerar;
  // c == N is the ring itself (same rounds, same bytes, exact): keep the ring.
  if (c == N || cerar.predictedSeconds > (1.0 - policy.minGain) * ring.predictedSeconds) {
    return ring;
  }
  return cerar;
}

}  // namespace cerar
