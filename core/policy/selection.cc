#include "core/policy/selection.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace cerar {

// The model of links not probed (no LinkModel::rounds): messages well under a segment cost
// their length; a message of one to two segments leaves the link idle for about one segment
// per round (the next round's first segment waits behind it), as first measured with c up to
// 32N. In between, m (1 + m/s) joins the two without a step, so the search never jumps.
double streamedRoundBytes(double m, const LinkModel& link) {
  const double s = link.segmentBytes;
  if (s <= 0) return m;
  return m <= s ? m * (1 + m / s) : std::max(m, 2 * s);
}

double transferSeconds(double m, const LinkModel& link) {
  if (link.rounds.empty()) return link.alpha + streamedRoundBytes(m, link) * link.beta;
  return measuredRoundSeconds(m, link.rounds, link);
}

double measuredRoundSeconds(double m, const std::vector<LinkModel::RoundPoint>& points,
                            const LinkModel& link) {
  m = wholeSegmentBytes(m, link);
  if (m >= points.back().bytes) return points.back().seconds * m / points.back().bytes;
  double bytes = 0, seconds = link.alpha;  // the segment [previous point, this point]
  for (const auto& point : points) {
    if (m <= point.bytes) {
      const double t = (m - bytes) / (point.bytes - bytes);
      return seconds + t * (point.seconds - seconds);
    }
    bytes = point.bytes;
    seconds = point.seconds;
  }
  return seconds;  // not reached
}

// The executor streams a round as whole segments and a last, partial one, which costs a wait and
// a post at both ends like a whole one. Measured on the emulated links (2 cores, send window),
// messages of whole segments beat their neighbours by 0.2-0.5 % on a quiet machine (N=4 @200,
// 16 MiB, 32 KiB segments: c = 512, one segment, 0.713 s; c = 288, 32 + 26 KiB, 0.719 s) and by
// far more on a loaded one (N=8, 16 KiB segments: c = 768, 16 + 5 KiB, 0.87 s against 0.74 s
// for c = 512). Charging the partial segment whole steers c to whole segments; it overstates
// the time of a c that is not, which the search then avoids.
double wholeSegmentBytes(double m, const LinkModel& link) {
  const double s = link.segmentBytes;
  return s > 0 && m > s ? s * std::ceil(m / s) : m;
}

double arithmeticBytes(double m, const LinkModel& link) {
  return link.rounds.empty() ? streamedRoundBytes(m, link) : m;
}

// A measured curve holds its choice's arithmetic as the executor overlaps it with the
// link; a plain model adds the choice's CPU cost to the link's.
double ringRoundSeconds(double m, const LinkModel& link) {
  if (!link.ringRounds.empty()) return measuredRoundSeconds(m, link.ringRounds, link);
  if (!link.rounds.empty()) return transferSeconds(m, link);  // CERAR's curve: an upper bound
  const double gamma = link.gammaRing > 0 ? link.gammaRing : link.gamma;
  return transferSeconds(m, link) + arithmeticBytes(m, link) * gamma;
}

double cerarRoundSeconds(double m, const LinkModel& link) {
  if (!link.rounds.empty()) return measuredRoundSeconds(m, link.rounds, link);
  return transferSeconds(m, link) + arithmeticBytes(m, link) * link.gamma;
}

double ringSeconds(int N, double bytes, const LinkModel& link) {
  if (N <= 1) return 0;
  return 2.0 * (N - 1) * ringRoundSeconds(bytes / N, link);
}

double cerarSeconds(int N, int c, double bytes, const LinkModel& link) {
  if (N <= 1) return 0;
  return (c + N - 2) * cerarRoundSeconds(bytes / c, link);
}

int bestComponents(int N, double bytes, size_t elements, const LinkModel& link) {
  if (N <= 2) return N;
  // More components than elements only adds empty rounds; past a few thousand, rounds cost
  // more than any saving (the search is exhaustive below that).
  constexpr double kMaxComponents = 16384;
  const int maxR =
      int(std::max(1.0, std::floor(std::min(double(elements), kMaxComponents) / N)));
  std::vector<double> seconds(size_t(maxR) + 1);
  double fastest = 1e300;
  for (int r = 1; r <= maxR; ++r) {
    seconds[size_t(r)] = cerarSeconds(N, r * N, bytes, link);
    fastest = std::min(fastest, seconds[size_t(r)]);
  }
  // With measured rounds, the fewest components within kComponentsTolerance of the fastest:
  // past the floor's end the modelled curve is nearly flat, and a long run's rounds cost more
  // than the probe's (N=8 at 200 Mbit/s: the model's minimum at 16 KiB messages, the runs' at
  // 32-64 KiB), while fewer components cost at most the tolerance in the model.
  const double tolerance = link.rounds.empty() ? 0 : kComponentsTolerance;
  for (int r = 1; r <= maxR; ++r)
    if (seconds[size_t(r)] <= (1 + tolerance) * fastest) return r * N;
  return N;  // not reached
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

LinkModel sharedHostLink(const LinkModel& link, int ranksPerHost) {
  LinkModel shared = link;
  const double L = std::max(1, ranksPerHost);
  shared.beta *= L;
  for (auto* points : {&shared.rounds, &shared.ringRounds, &shared.wireRounds}) {
    for (LinkModel::RoundPoint& point : *points) point.bytes /= L;
  }
  return shared;
}

double localSeconds(double bytes, int ranksPerHost, const LinkModel& link) {
  const double L = std::max(1, ranksPerHost);
  return 2 * (L - 1) * (link.localAlpha + bytes / L * link.localBeta);
}

}  // namespace cerar
