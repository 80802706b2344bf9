#include "ops/adasum_run.h"

#include <chrono>
#include <numeric>

#include "ops/algorithms/adasum.h"
#include "common/error.h"

namespace cerar {

namespace {

// Posts a send and a receive with one peer and waits for both; empty sides are skipped (the
// peer skips the matching one, its lengths being the mirror of these).
void exchange(Transport& transport, int peer, const void* send, size_t sendBytes, void* recv,
              size_t recvBytes, RunStats& stats) {
  if (recvBytes > 0) transport.postRecv(peer, recv, recvBytes);
  if (sendBytes > 0) transport.postSend(peer, send, sendBytes);
  if (recvBytes > 0) transport.waitRecv(peer);
  if (sendBytes > 0) transport.waitSend(peer);
  stats.rounds += 1;
  stats.bytesSent += sendBytes;
  stats.bytesReceived += recvBytes;
}

// Sums `sums` over the ranks [first, first + 2D) by recursive doubling; the lower block's
// value is always the left operand, so every rank of the group ends with the same bits.
void groupSum(Transport& transport, int distance, std::vector<double>& sums, RunStats& stats) {
  std::vector<double> theirs(sums.size());
  const int rank = transport.rank();
  for (int s = 1; s <= distance; s <<= 1) {
    exchange(transport, rank ^ s, sums.data(), sums.size() * sizeof(double), theirs.data(),
             theirs.size() * sizeof(double), stats);
    const bool lower = (rank & s) == 0;
    for (size_t i = 0; i < sums.size(); ++i) {
      sums[i] = lower ? sums[i] + theirs[i] : theirs[i] + sums[i];
    }
  }
}

}  // namespace

RunStats AdasumRunner::run(Transport& transport, void* data, DType dtype,
                           const std::vector<size_t>& tensorSizes) {
  const auto start = std::chrono::steady_clock::now();
  const int N = transport.size();
  const Status valid = validateAdasumSize(N);
  if (!valid.ok()) valid.raise();
  CERAR_CHECK_ARGUMENT(isAdasumDType(dtype), "Adasum needs a floating-point dtype, got ",
                dtypeName(dtype));
  const size_t d = std::accumulate(tensorSizes.begin(), tensorSizes.end(), size_t(0));
  RunStats stats;
  if (N == 1 || d == 0) return stats;

  const AdasumPlan plan = makeAdasumPlan(N, d, transport.rank());
  const size_t es = dtypeSize(dtype);
  auto* bytes = static_cast<std::byte*>(data);
  auto at = [&](size_t element) { return bytes + element * es; };
  if (scratch_.size() < plan.levels.front().keep.length * es) {
    scratch_.resize(plan.levels.front().keep.length * es);
  }
  std::vector<double> sums(3 * tensorSizes.size());

  for (const AdasumLevel& level : plan.levels) {
    const Range& keep = level.keep;
    exchange(transport, level.partner, at(level.give.offset), level.give.length * es,
             scratch_.data(), keep.length * es, stats);
    // a is the lower rank's vector, b the upper's, on both ranks of every pair.
    const std::byte* mine = at(keep.offset);
    const std::byte* theirs = scratch_.data();
    const std::byte* a = level.lower ? mine : theirs;
    const std::byte* b = level.lower ? theirs : mine;
    const std::vector<TensorPiece> pieces = tensorPieces(tensorSizes, keep);
    std::fill(sums.begin(), sums.end(), 0.0);
    for (const TensorPiece& p : pieces) {
      const size_t skip = (p.range.offset - keep.offset) * es;
      addDotAndNorms(dtype, a + skip, b + skip, p.range.length, &sums[3 * p.tensor]);
    }
    groupSum(transport, level.distance, sums, stats);
    for (const TensorPiece& p : pieces) {
      const size_t skip = (p.range.offset - keep.offset) * es;
      const double* s = &sums[3 * p.tensor];
      adasumCombine(dtype, a + skip, b + skip, at(p.range.offset), p.range.length,
                    adasumCoefficients(s[0], s[1], s[2]));
    }
  }
  for (auto level = plan.levels.rbegin(); level != plan.levels.rend(); ++level) {
    exchange(transport, level->partner, at(level->keep.offset), level->keep.length * es,
             at(level->give.offset), level->give.length * es, stats);
  }
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace cerar
