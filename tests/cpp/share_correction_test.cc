// Share-corrected decoding against the spec's claim (cerar-protocol.md, "What each worker ends
// with"): on correlated inputs g = mu + noise it cuts CERAR's worst error 2-3x, on iid uniform
// inputs only 1.1-1.7x; it never touches the exact ring (r = 1), the home or position 1.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "ops/algorithms/share_correction.h"
#include "simulate.h"

namespace cerar {
namespace {

using testing::exactSums;
using testing::simulate;

AllreduceOptions cerarOptions(int c, double eps, bool correct) {
  AllreduceOptions options;
  options.algorithm = Algorithm::kCerar;
  options.components = c;
  options.eps = eps;
  options.shareCorrection = correct;
  return options;
}

// g_i = sqrt(rho) * mu + sqrt(1 - rho) * noise_i: rho is the correlation between ranks.
// rho < 0 draws iid uniform [-1, 1) instead.
std::vector<std::vector<float>> inputs(int N, size_t d, double rho, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> mu(d);
  for (auto& v : mu) v = normal(rng);
  std::vector<std::vector<float>> g(N, std::vector<float>(d));
  for (auto& rank : g)
    for (size_t e = 0; e < d; ++e)
      rank[e] = rho < 0 ? float(uniform(rng))
                        : float(std::sqrt(rho) * mu[e] + std::sqrt(1 - rho) * normal(rng));
  return g;
}

// Worst |result - S| / max|S| over all ranks and elements.
double worstError(const std::vector<std::vector<float>>& out,
                  const std::vector<testing::Reference>& sum) {
  double maxSum = 0, worst = 0;
  for (auto s : sum) maxSum = std::max(maxSum, double(std::abs(s)));
  for (const auto& rank : out)
    for (size_t e = 0; e < sum.size(); ++e)
      worst = std::max(worst, double(std::abs(rank[e] - sum[e])));
  return worst / maxSum;
}

// (plain, corrected) worst relative error for one configuration.
std::pair<double, double> measure(int N, int r, double eps, double rho, unsigned seed) {
  const size_t d = size_t(N) * r * 64;
  auto plain = inputs(N, d, rho, seed);
  std::vector<testing::Reference> sum, magnitude;
  exactSums(plain, sum, magnitude);
  auto corrected = plain;
  simulate(plain, cerarOptions(N * r, eps, false));
  simulate(corrected, cerarOptions(N * r, eps, true));
  return {worstError(plain, sum), worstError(corrected, sum)};
}

TEST(ShareCorrection, CorrelatedInputsCutTheWorstError2To3x) {
  for (int N : {4, 8, 16}) {
    for (int r : {2, 4, 8}) {
      const auto [plain, corrected] = measure(N, r, 1e-3, 0.5, 11 * N + r);
      const double gain = plain / corrected;
      std::printf("correlated N=%2d r=%d: plain %.2e corrected %.2e gain %.2fx\n", N, r, plain,
                  corrected, gain);
      // The spec measured 2-3x; allow some slack for other seeds.
      EXPECT_GT(gain, 1.7) << "N=" << N << " r=" << r;
    }
  }
}

TEST(ShareCorrection, IidUniformInputsGainLittleButNeverLoseMuch) {
  for (int N : {4, 8, 16}) {
    for (int r : {2, 4, 8}) {
      const auto [plain, corrected] = measure(N, r, 1e-3, -1, 7 * N + r);
      const double gain = plain / corrected;
      std::printf("iid uniform N=%2d r=%d: plain %.2e corrected %.2e gain %.2fx\n", N, r, plain,
                  corrected, gain);
      EXPECT_GT(gain, 0.9) << "N=" << N << " r=" << r;
      EXPECT_LT(gain, 2.5) << "N=" << N << " r=" << r;
    }
  }
}

// The gain against the correlation between ranks, at the spec's eps = 1e-3 and the default
// 2^-11 (printed for docs/fidelity.md). At 2^-11 the home's rounding/eps term, which no decoding
// removes, is as large as the eps*A_j term, so the gain is smaller there.
TEST(ShareCorrection, GainByCorrelationAndEps) {
  for (double eps : {1e-3, std::ldexp(1.0, -11)}) {
    for (int N : {4, 16}) {
      for (double rho : {0.0, 0.5, 0.9, 0.99}) {
        double plain = 0, corrected = 0;
        for (unsigned seed = 0; seed < 3; ++seed) {  // worst errors are noisy: sum 3 seeds
          const auto [p, c] = measure(N, 4, eps, rho, 5 * N + seed);
          plain += p / 3;
          corrected += c / 3;
        }
        std::printf("eps=%.2e rho=%.2f N=%2d r=4: plain %.2e corrected %.2e gain %.2fx\n", eps,
                    rho, N, plain, corrected, plain / corrected);
        EXPECT_GT(plain / corrected, 0.9) << "N=" << N << " rho=" << rho << " eps=" << eps;
      }
    }
  }
}

// The exact ring (r = 1), the home's chunk, position 1 and every last slice are untouched.
TEST(ShareCorrection, LeavesExactPartsBitIdentical) {
  const int N = 5, r = 3;
  const size_t d = N * r * 10 + 4;
  auto plain = inputs(N, d, 0.5, 3);
  auto corrected = plain;
  auto ring = plain, ringCorrected = plain;
  simulate(plain, cerarOptions(N * r, 1e-3, false));
  simulate(corrected, cerarOptions(N * r, 1e-3, true));
  simulate(ring, cerarOptions(N, 1e-3, false));
  simulate(ringCorrected, cerarOptions(N, 1e-3, true));
  const Layout layout(N, N * r, d);
  for (int rank = 0; rank < N; ++rank) {
    ASSERT_EQ(ring[rank], ringCorrected[rank]);
    for (int tau = 0; tau < N; ++tau) {
      const int position = (rank - tau + N) % N;
      for (int l = 0; l < r; ++l) {
        const Range s = layout.slice(tau, l);
        const bool same = std::memcmp(&plain[rank][s.offset], &corrected[rank][s.offset],
                                      s.length * sizeof(float)) == 0;
        if (position < 2 || l == r - 1) {
          EXPECT_TRUE(same) << "rank " << rank << " chunk " << tau << " slice " << l;
        } else {
          EXPECT_FALSE(same) << "rank " << rank << " chunk " << tau << " slice " << l;
        }
      }
    }
  }
}

TEST(ShareCorrection, PredictedBoundHoldsAndModelEps) {
  EXPECT_EQ(modelEps(4, DType::kFloat32), std::ldexp(1.0, -11));
  EXPECT_EQ(modelEps(16, DType::kFloat32), std::ldexp(1.0, -10));
  for (int N : {4, 8}) {
    const double eps = std::ldexp(1.0, -11);
    const size_t d = N * 4 * 64;
    auto out = inputs(N, d, 0.5, 9);
    std::vector<testing::Reference> sum, magnitude;
    exactSums(out, sum, magnitude);
    simulate(out, cerarOptions(N * 4, eps, false));
    double maxMagnitude = 0, worst = 0;
    for (auto m : magnitude) maxMagnitude = std::max(maxMagnitude, double(m));
    for (const auto& rank : out)
      for (size_t e = 0; e < d; ++e) worst = std::max(worst, double(std::abs(rank[e] - sum[e])));
    EXPECT_LE(worst / maxMagnitude, predictedErrorBound(N, N * 4, eps, DType::kFloat32));
  }
}

}  // namespace
}  // namespace cerar
