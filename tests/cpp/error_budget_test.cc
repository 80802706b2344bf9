// The error budget (core/policy/error_budget.h): the selector's choices on a fixed cost model, the
// fp16 guard, and a 4-process job whose ranks differ in their settings and link figures but
// run rank 0's choices, each within its predicted error of an extended-precision sum.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/config/config.h"
#include "core/policy/error_budget.h"
#include "core/policy/fusion.h"
#include "ops/algorithms/share_correction.h"
#include "runtime_scenarios.h"
#include "tools/local_job.h"

namespace cerar {
namespace {

using namespace scenarios;

// 200 Mbit/s links (40 ns/B), 50 us latency, 0.2 ns/B arithmetic: the emulated cluster.
LinkModel slowLink() { return LinkModel{50e-6, 40e-9, 0.2e-9}; }

SelectionPolicy budget(double maxError, bool fp16, bool bf16) {
  SelectionPolicy p;
  p.maxError = maxError;
  p.allowFp16 = fp16;
  p.allowBf16 = bf16;
  p.strictErrorBound = true;  // the documented bounds (calibrated ones: error_calibration_test)
  return p;
}

BudgetQuery f32Sum(int N, size_t elements) {
  return {N, DType::kFloat32, ReduceOp::kSum, elements, true};
}

constexpr size_t k64MiB = size_t(16) << 20;  // float32 elements

TEST(ErrorBudget, BoundsAreTheDocumentedFormulas) {
  const double u32 = 0x1p-24;
  EXPECT_DOUBLE_EQ(ringErrorBound(8, DType::kFloat32, ReduceOp::kSum), 7 * u32);
  EXPECT_EQ(ringErrorBound(8, DType::kFloat32, ReduceOp::kMax), 0);
  EXPECT_EQ(ringErrorBound(8, DType::kInt32, ReduceOp::kSum), 0);
  EXPECT_DOUBLE_EQ(wireErrorBound(8, Wire::kFloat16), 8 * (0x1p-11 + 0x1p-15) + 7 * u32);
  EXPECT_DOUBLE_EQ(wireErrorBound(8, Wire::kBFloat16), 8 * 0x1p-8 + 7 * u32);
  // The 16-bit ring sends half the bytes, streamed in segments like the float32 ring.
  const LinkModel link = slowLink();
  const double w = 2.0 * k64MiB / 8;  // 32 MiB per round: the segments keep the link busy
  ASSERT_GE(w, 2 * link.segmentBytes);
  EXPECT_DOUBLE_EQ(wireRingSeconds(8, 4.0 * k64MiB, link),
                   14 * (link.alpha + w * (link.beta + 4 * link.gamma)));
  const double small = 2.0 * (64 << 10) / 8;  // 16 KiB per round: under one segment
  EXPECT_DOUBLE_EQ(wireRingSeconds(8, 4.0 * (64 << 10), link),
                   14 * (link.alpha + streamedRoundBytes(small, link) *
                                          (link.beta + 4 * link.gamma)));
  EXPECT_GT(streamedRoundBytes(small, link), small);
}

// The int8 wire: a quarter of the float32 ring's bytes (and its scales), chosen only where
// listed and where its bound fits; faster than the 16-bit wires on slow links.
TEST(ErrorBudget, Int8WhereListedAndWithinTheBudget) {
  const double u32 = 0x1p-24;
  EXPECT_DOUBLE_EQ(wireErrorBound(8, Wire::kInt8), 8 * ((1 + u32) / 254 + u32) + 7 * u32);
  const LinkModel link = slowLink();
  const double bytes = 4.0 * k64MiB;
  EXPECT_LT(int8RingSeconds(8, bytes, link), 0.6 * wireRingSeconds(8, bytes, link));
  EXPECT_GT(int8RingSeconds(8, bytes, link), wireRingSeconds(8, bytes / 2, link));
  SelectionPolicy p = budget(5e-2, true, true);
  EXPECT_EQ(selectWithinBudget(f32Sum(8, k64MiB), link, p).wire, Wire::kFloat16);  // not listed
  p.allowInt8 = true;
  Selection s = selectWithinBudget(f32Sum(8, k64MiB), link, p);
  EXPECT_EQ(s.wire, Wire::kInt8);
  EXPECT_DOUBLE_EQ(s.predictedError, wireErrorBound(8, Wire::kInt8));
  p.maxError = 2e-2;  // below int8's strict bound at N = 8 (3.1e-2), above fp16's
  EXPECT_EQ(selectWithinBudget(f32Sum(8, k64MiB), link, p).wire, Wire::kFloat16);
}

// 16-bit data may take the int8 wire (over a float32 copy: its error plus one rounding to the
// data's format), never a 16-bit wire; a unit's own int8 request on 16-bit data is kept.
TEST(ErrorBudget, SixteenBitDataTakesOnlyTheInt8Wire) {
  const LinkModel link = slowLink();
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    const BudgetQuery q{8, dtype, ReduceOp::kSum, k64MiB, true};
    const double rounding = dtype == DType::kFloat16 ? 0x1p-11 : 0x1p-8;
    SelectionPolicy p = budget(5e-2, true, true);
    EXPECT_EQ(selectWithinBudget(q, link, p).wire, Wire::kNone);  // no 16-bit wire for it
    p.allowInt8 = true;
    const Selection s = selectWithinBudget(q, link, p);
    EXPECT_EQ(s.wire, Wire::kInt8);
    EXPECT_DOUBLE_EQ(s.predictedError, wireErrorBound(8, Wire::kInt8) + rounding);
    EXPECT_DOUBLE_EQ(s.predictedSeconds, int8RingSeconds(8, 4.0 * k64MiB, link));
    p.maxError = wireErrorBound(8, Wire::kInt8);  // the rounding does not fit
    EXPECT_EQ(selectWithinBudget(q, link, p).wire, Wire::kNone);
    Response unit{{"g"}, {}, {}, "", {}};
    unit.description.kind = Kind::kAllreduce;
    unit.description.dtype = dtype;
    unit.description.op = Op::kSum;
    unit.description.shapes = {{int64_t(k64MiB)}};
    unit.description.wire = Wire::kInt8;
    EXPECT_EQ(decideGroups({unit}, 8, 64u << 20, link, SelectionPolicy{}).at(0).wire,
              Wire::kInt8);
    unit.description.wire = Wire::kFloat16;
    EXPECT_EQ(decideGroups({unit}, 8, 64u << 20, link, SelectionPolicy{}).at(0).wire,
              Wire::kNone);
  }
}

TEST(ErrorBudget, ChoicesOnAFixedModel) {
  const LinkModel link = slowLink();
  // N = 8, 64 MiB float32: ring 4.9 s, CERAR ~3.6 s (bound 1.34e-3), 16-bit ring 2.5 s
  // (bounds 4.2e-3 fp16, 3.1e-2 bf16).
  Selection s = selectWithinBudget(f32Sum(8, k64MiB), link, budget(5e-2, true, true));
  EXPECT_TRUE(s.budgeted);
  EXPECT_EQ(s.wire, Wire::kFloat16);  // as fast as bf16, smaller bound
  EXPECT_DOUBLE_EQ(s.predictedError, wireErrorBound(8, Wire::kFloat16));
  s = selectWithinBudget(f32Sum(8, k64MiB), link, budget(5e-2, false, true));
  EXPECT_EQ(s.wire, Wire::kBFloat16);
  s = selectWithinBudget(f32Sum(8, k64MiB), link, budget(1e-2, false, true));
  EXPECT_EQ(s.algorithm, Algorithm::kCerar);  // bf16's bound exceeds 1e-2
  s = selectWithinBudget(f32Sum(8, k64MiB), link, budget(2e-3, true, true));
  EXPECT_EQ(s.algorithm, Algorithm::kCerar);
  EXPECT_EQ(s.wire, Wire::kNone);
  EXPECT_EQ(s.eps, 0x1p-11);
  EXPECT_DOUBLE_EQ(s.predictedError, predictedErrorBound(8, s.components, 0x1p-11,
                                                         DType::kFloat32));
  EXPECT_LT(s.predictedSeconds, ringSeconds(8, 4.0 * k64MiB, link));
  // Lossy wires not allowed: CERAR even with a loose budget.
  s = selectWithinBudget(f32Sum(8, k64MiB), link, budget(5e-2, false, false));
  EXPECT_EQ(s.algorithm, Algorithm::kCerar);
  // Below CERAR's bound: the exact ring, whose own rounding fits.
  s = selectWithinBudget(f32Sum(8, k64MiB), link, budget(1e-3, true, true));
  EXPECT_EQ(s.algorithm, Algorithm::kRing);
  EXPECT_EQ(s.wire, Wire::kNone);
  EXPECT_DOUBLE_EQ(s.predictedError, 7 * 0x1p-24);
  // N = 16: the default eps's bound (2.3e-3) misses 2e-3, modelEps's (2^-10: 1.9e-3) fits.
  s = selectWithinBudget(f32Sum(16, k64MiB), link, budget(2e-3, false, false));
  EXPECT_EQ(s.algorithm, Algorithm::kCerar);
  EXPECT_EQ(s.eps, 0x1p-10);
  // A user's eps is kept: 2^-11 misses 2e-3 at N = 16, so the ring.
  SelectionPolicy fixedEps = budget(2e-3, false, false);
  fixedEps.eps = 0x1p-11;
  EXPECT_EQ(selectWithinBudget(f32Sum(16, k64MiB), link, fixedEps).algorithm, Algorithm::kRing);
}

TEST(ErrorBudget, TheExactRingWhereNothingElseCanOrPays) {
  const LinkModel link = slowLink();
  const SelectionPolicy loose = budget(0.5, true, true);
  // Small buffers: never CERAR; a wire where it fits the budget and the model says it pays
  // (its bytes still count at 200 Mbit/s), else the exact ring.
  EXPECT_EQ(selectWithinBudget(f32Sum(8, 1000), link, loose).algorithm, Algorithm::kRing);
  EXPECT_EQ(selectWithinBudget(f32Sum(8, 1000), link, loose).wire, Wire::kFloat16);
  EXPECT_EQ(selectWithinBudget(f32Sum(8, 1000), link, budget(0.5, false, false)).wire,
            Wire::kNone);
  EXPECT_EQ(selectWithinBudget(f32Sum(8, 16), link, loose).wire, Wire::kNone);  // latency only
  // N = 2: CERAR saves nothing, a 16-bit wire still halves the bytes.
  EXPECT_EQ(selectWithinBudget(f32Sum(2, k64MiB), link, budget(0.5, false, false)).algorithm,
            Algorithm::kRing);
  EXPECT_EQ(selectWithinBudget(f32Sum(2, k64MiB), link, loose).wire, Wire::kFloat16);
  const Selection max =
      selectWithinBudget({8, DType::kFloat32, ReduceOp::kMax, k64MiB, true}, link, loose);
  EXPECT_EQ(max.algorithm, Algorithm::kRing);
  EXPECT_EQ(max.wire, Wire::kNone);
  EXPECT_EQ(max.predictedError, 0);
  // Not on the host (or not float32): no wire; float64 takes CERAR at its own tiny bound.
  EXPECT_EQ(selectWithinBudget({8, DType::kFloat32, ReduceOp::kSum, k64MiB, false}, link, loose)
                .algorithm,
            Algorithm::kCerar);
  const Selection f64 = selectWithinBudget({8, DType::kFloat64, ReduceOp::kSum, k64MiB / 2, true},
                                           link, budget(1e-6, true, true));
  EXPECT_EQ(f64.algorithm, Algorithm::kCerar);
  EXPECT_EQ(f64.wire, Wire::kNone);
  EXPECT_LT(f64.predictedError, 1e-6);
  // A fast link where arithmetic dominates: a 16-bit hop's casts cost more than the bytes
  // saved (gammaWire 4 ns/B against beta 0.1 ns/B), so no wire.
  LinkModel fast{5e-6, 0.1e-9, 0.2e-9};
  fast.gammaWire = 4e-9;
  EXPECT_EQ(selectWithinBudget(f32Sum(8, k64MiB), fast, budget(0.5, true, true)).wire,
            Wire::kNone);
}

TEST(ErrorBudget, DecideGroupsUsesTheBudgetOnlyUnderAuto) {
  Response unit{{"g"}, {}, {}, "", {}};
  unit.description.kind = Kind::kAllreduce;
  unit.description.dtype = DType::kFloat32;
  unit.description.op = Op::kSum;
  unit.description.shapes = {{int64_t(k64MiB)}};
  SelectionPolicy policy = budget(5e-2, true, true);
  auto group = decideGroups({unit}, 8, 64u << 20, slowLink(), policy).at(0);
  EXPECT_TRUE(group.budgeted);
  EXPECT_EQ(group.wire, Wire::kFloat16);
  policy.algorithm = "cerar";  // a forced algorithm wins over the budget
  group = decideGroups({unit}, 8, 64u << 20, slowLink(), policy).at(0);
  EXPECT_FALSE(group.budgeted);
  EXPECT_EQ(group.algorithm, Algorithm::kCerar);
  EXPECT_EQ(group.wire, Wire::kNone);
  policy.algorithm = "auto";
  unit.description.wire = Wire::kBFloat16;  // the unit's own request wins
  group = decideGroups({unit}, 8, 64u << 20, slowLink(), policy).at(0);
  EXPECT_EQ(group.wire, Wire::kBFloat16);
  EXPECT_FALSE(group.budgeted);
}

TEST(ErrorBudget, Fp16GuardRefusesOverflowAndSubnormalData) {
  std::vector<float> x(100, 1.0f);
  EXPECT_TRUE(codec::fp16GuardPasses(codec::fp16GuardBits(x.data(), x.size(), 8)));
  x[7] = 4096.0f;  // 8 of them could sum to 2^15
  EXPECT_FALSE(codec::fp16GuardPasses(codec::fp16GuardBits(x.data(), x.size(), 8)));
  EXPECT_TRUE(codec::fp16GuardPasses(codec::fp16GuardBits(x.data(), x.size(), 4)));
  x[7] = INFINITY;
  EXPECT_FALSE(codec::fp16GuardPasses(codec::fp16GuardBits(x.data(), x.size(), 4)));
  std::vector<float> tiny(100, 1e-4f);
  tiny[3] = NAN;
  const uint8_t bits = codec::fp16GuardBits(tiny.data(), tiny.size(), 4);
  EXPECT_EQ(bits, 0);
  EXPECT_FALSE(codec::fp16GuardPasses(bits));
  EXPECT_TRUE(codec::fp16GuardPasses(bits | 2));  // another rank has normal data
  EXPECT_FALSE(codec::fp16GuardPasses(bits | 3));
}

TEST(ErrorBudget, SettingsAreValidated) {
  const auto config = [](const std::string& compression, const std::string& maxError) {
    return configFromEnvironment([&](const std::string& name) -> std::optional<std::string> {
      if (name == "CERAR_COMPRESSION") return compression;
      if (name == "CERAR_MAX_ERROR") return maxError;
      return std::nullopt;
    });
  };
  EXPECT_EQ(config("allow", "1e-3").maxError, 1e-3);
  EXPECT_THROW(config("allow", "-1"), InvalidArgumentError);
  EXPECT_THROW(config("fp8", "1e-3"), InvalidArgumentError);
}

// --- 4 processes ---------------------------------------------------------------------------

constexpr int kRanks = 4;
constexpr size_t kLarge = 1 << 18;  // 1 MiB of float32: the budget considers lossy candidates

// Rank r's input number `which`: 1 + standard normal noise, times `scale`.
template <typename T>
std::vector<T> input(int rank, int which, size_t n, double scale) {
  std::mt19937 gen(1000 * which + rank);
  std::normal_distribution<double> normal(0, 1);
  std::vector<T> g(n);
  for (auto& x : g) x = T(scale * (1 + normal(gen)));
  return g;
}

// max |out - sum| over max_e sum_i |g_i(e)| against an extended-precision sum of every rank's
// input, and kappa = max_e sum_i |g_i(e)| / max_e |sum|.
template <typename T>
std::pair<double, double> relativeError(const std::vector<T>& out, int which, double scale) {
  std::vector<long double> sum(out.size(), 0), magnitude(out.size(), 0);
  for (int r = 0; r < kRanks; ++r) {
    const auto g = input<T>(r, which, out.size(), scale);
    for (size_t e = 0; e < g.size(); ++e) sum[e] += g[e], magnitude[e] += std::fabs(g[e]);
  }
  long double worst = 0, maxSum = 0, maxMagnitude = 0;
  for (size_t e = 0; e < out.size(); ++e) {
    worst = std::max(worst, std::fabs(static_cast<long double>(out[e]) - sum[e]));
    maxSum = std::max(maxSum, std::fabs(sum[e]));
    maxMagnitude = std::max(maxMagnitude, magnitude[e]);
  }
  return {double(worst / maxMagnitude), double(maxMagnitude / maxSum)};
}

// FNV-1a of a result's bytes.
template <typename T>
std::string digest(const std::vector<T>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return std::to_string(h);
}

// Rank 0 alone has the budget, the lossy wires allowed, debug mode and slow link figures;
// the others have no budget and a fast link. Every rank must run rank 0's choices.
RuntimeConfig rankConfig(int rank) {
  RuntimeConfig config = testConfig();
  config.logSink = [](const std::string&) {};  // the expected warnings about rank 0's values
  if (rank == 0) {
    config.maxError = 5e-3;
    config.errorBound = "strict";  // the others' calibrated default must not matter
    config.compression = "allow";
    config.debugError = true;
    config.linkFigures = std::array<double, 3>{50e-6, 40e-9, 0.2e-9};
  } else {
    config.linkFigures = std::array<double, 3>{1e-7, 0.01e-9, 0.2e-9};
  }
  return config;
}

std::string budgetJob(int rank, std::shared_ptr<Transport> transport) {
  auto rt = Runtime::startWith(rankConfig(rank), transport);
  std::string out;
  // Reduces input `which` of type T with `n` elements; appends the choice, the bound and the
  // bits of the result where every rank must hold the same (the rings); checks the error.
  const auto reduce = [&](auto tag, int which, size_t n, double scale, DType dtype) {
    using T = decltype(tag);
    auto g = input<T>(rank, which, n, scale);
    Tensor t = view(g, {int64_t(n)}, dtype);
    rt->allreduce("g" + std::to_string(which), t, t, Op::kSum).wait();
    const RuntimeStats s = rt->stats();
    const auto [error, kappa] = relativeError(g, which, scale);
    check(error <= s.predictedErrorLast, "input ", which, " (", s.lastChoice, "): error ",
          error, " of max sum|g| over the predicted ", s.predictedErrorLast);
    if (s.lastChoice != "ring") {
      check(s.measuredErrorLast <= s.predictedErrorLast * kappa, "measured ",
            s.measuredErrorLast, " of max |S| over predicted ", s.predictedErrorLast, " x ",
            kappa);
    }
    out += detail::concat(which, ":", s.lastChoice, " ", s.predictedErrorLast, " ");
    if (s.lastChoice != "cerar") out += digest(g) + " ";
  };
  reduce(float(), 1, kLarge, 1.0, DType::kFloat32);       // the fp16 wire
  // 16 MiB of float64: CERAR (c = 12 of the model; no wire for float64).
  reduce(double(), 2, size_t(1) << 21, 1.0, DType::kFloat64);
  reduce(float(), 3, 1000, 1.0, DType::kFloat32);         // small: still a wire that pays
  reduce(float(), 4, kLarge, 1e4, DType::kFloat32);       // fp16 would overflow: refused
  reduce(float(), 5, kLarge, 1e-5, DType::kFloat32);      // fp16 subnormals: refused
  const RuntimeStats s = rt->stats();
  out += detail::concat("budgeted ", s.budgetBuffers, " wire ", s.wireBuffers, " fallbacks ",
                        s.wireFallbacks, " cerar ", s.cerarBuffers, " measured ",
                        s.measuredBuffers);
  rt->shutdown();
  return out;
}

TEST(ErrorBudgetMultiprocess, RanksRunRankZerosChoicesWithinTheirBounds) {
  LocalJobOptions options;
  options.size = kRanks;
  options.transport = LocalTransport::kGloo;
  options.timeout = 20s;
  options.deadline = 120s;
  const auto results = runLocalJob(options, budgetJob);
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(results[rank], results[0]) << rank;
  const std::string& r = results[0];
  EXPECT_NE(r.find("1:ring-fp16 "), std::string::npos) << r;
  EXPECT_NE(r.find("2:cerar "), std::string::npos) << r;
  EXPECT_NE(r.find("3:ring-fp16 "), std::string::npos) << r;
  EXPECT_NE(r.find("4:ring "), std::string::npos) << r;
  EXPECT_NE(r.find("5:ring "), std::string::npos) << r;
  EXPECT_NE(r.find("budgeted 5 wire 2 fallbacks 2 cerar 1 measured 3"), std::string::npos) << r;
}

}  // namespace
}  // namespace cerar
