#include "core/selection.h"

#include <algorithm>
#include <cmath>

namespace cerar {

namespace {

double roundSeconds(double messageBytes, const LinkModel& link) {
  const double fill = std::min(messageBytes, link.segmentBytes);
  return link.alpha + (messageBytes + fill) * (link.beta + link.gamma);
}

}  // namespace

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
  const double alpha = link.alpha + link.segmentBytes * perByte;
  const double ideal = alpha > 0 ? std::sqrt((N - 2) * bytes * perByte / alpha) : double(elements);
  // More components than elements only adds empty rounds.
  const double maxR = std::max(1.0, std::floor(double(elements) / N));
  const double low = std::clamp(std::floor(ideal / N), 1.0, maxR);
  const double high = std::clamp(std::ceil(ideal / N), 1.0, maxR);
  const int cLow = static_cast<int>(low) * N;
  const int cHigh = static_cast<int>(high) * N;
  return cerarSeconds(N, cHigh, bytes, link) < cerarSeconds(N, cLow, bytes, link) ? cHigh : cLow;
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
