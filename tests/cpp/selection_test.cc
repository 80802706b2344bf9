// Algorithm selection (core/policy/selection.h): the ring or CERAR per buffer, c from the cost model
// (with and without the probe's CERAR rounds), each choice by its own cost, the autotuner's
// scale of c, forced settings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/policy/error_budget.h"
#include "core/policy/selection.h"

namespace cerar {
namespace {

// c's scale: a multiple of N around the model's c, within [N, elements].
TEST(Selection, ScaledComponents) {
  EXPECT_EQ(scaledComponents(4, 32, 1.0, 1 << 20), 32);
  EXPECT_EQ(scaledComponents(4, 32, 2.0, 1 << 20), 64);
  EXPECT_EQ(scaledComponents(4, 32, 0.25, 1 << 20), 8);
  EXPECT_EQ(scaledComponents(4, 8, 0.25, 1 << 20), 4);   // never below N
  EXPECT_EQ(scaledComponents(4, 32, 4.0, 40), 40);       // never more than the elements
  EXPECT_EQ(scaledComponents(4, 12, 0.5, 1 << 20), 8);   // 6 rounds to a multiple of 4
}

TEST(Selection, RingForSmallIntegerMinMaxAndTwoRanks) {
  LinkModel link;
  SelectionPolicy automatic;
  const size_t big = 64u << 20;
  EXPECT_EQ(selectAlgorithm(4, DType::kFloat32, ReduceOp::kSum, 1000, link, automatic).algorithm,
            Algorithm::kRing);
  EXPECT_EQ(selectAlgorithm(4, DType::kInt32, ReduceOp::kSum, big, link, automatic).algorithm,
            Algorithm::kRing);
  EXPECT_EQ(selectAlgorithm(4, DType::kFloat32, ReduceOp::kMax, big, link, automatic).algorithm,
            Algorithm::kRing);
  EXPECT_EQ(selectAlgorithm(2, DType::kFloat32, ReduceOp::kSum, big, link, automatic).algorithm,
            Algorithm::kRing);
  Selection s = selectAlgorithm(8, DType::kFloat32, ReduceOp::kSum, big, link, automatic);
  EXPECT_EQ(s.algorithm, Algorithm::kCerar);
  EXPECT_EQ(s.components % 8, 0);
  EXPECT_GT(s.components, 8);
  EXPECT_EQ(s.eps, defaultEps(DType::kFloat32));
  EXPECT_LT(s.predictedSeconds, ringSeconds(8, big * 4.0, link));
}

TEST(Selection, ComponentsFollowTheCostModel) {
  LinkModel link{100e-6, 1e-9, 0, 0};  // no segment: the spec's plain alpha-beta model
  // sqrt((N-2) d b / alpha) = sqrt(6 * 2^26 * 1e-9 / 1e-4) ~ 63.5 -> a multiple of 8 near it.
  const int c = bestComponents(8, double(1 << 26), size_t(1) << 24, link);
  EXPECT_TRUE(c == 56 || c == 64) << c;
  for (int other = 8; other <= 256; other += 8) {
    EXPECT_LE(cerarSeconds(8, c, double(1 << 26), link),
              cerarSeconds(8, other, double(1 << 26), link) * (1 + 1e-9));
  }
  EXPECT_EQ(bestComponents(4, 1e9, 3, link), 4);  // never more components than elements
}

// Without a probe (no LinkModel::rounds), the model of streaming in segments of s: a round of
// one to two segments idles its link for about one segment, one well under a segment costs
// its length: at N = 8 on a 155 Mbit/s link with
// 256 KiB segments, 64 MiB lands near c = d/(2s) = 128 and 4 MiB on small messages (c in the
// hundreds), where the emulated cluster measured its best; not c = 24-40 (a whole segment
// charged to every round), nor the ring at 4 MiB.
TEST(Selection, StreamedRoundsAvoidMessagesOfOneToTwoSegments) {
  LinkModel slow{150e-6, 8.0 / 155e6, 0.1e-9, 256 * 1024};
  const double bytes = double(64 << 20);
  const int c = bestComponents(8, bytes, size_t(16) << 20, slow);
  EXPECT_GE(c, 96) << c;
  EXPECT_LE(c, 160) << c;
  EXPECT_GE(bestComponents(8, double(4 << 20), size_t(1) << 20, slow), 128);
  EXPECT_EQ(selectAlgorithm(8, DType::kFloat32, ReduceOp::kSum, size_t(1) << 20, slow,
                            SelectionPolicy{}).algorithm, Algorithm::kCerar);
  EXPECT_DOUBLE_EQ(streamedRoundBytes(1 << 20, slow), 1 << 20);
  EXPECT_DOUBLE_EQ(streamedRoundBytes(384 << 10, slow), 512 << 10);
  EXPECT_DOUBLE_EQ(streamedRoundBytes(256 << 10, slow), 512 << 10);
  EXPECT_DOUBLE_EQ(streamedRoundBytes(64 << 10, slow), 80 << 10);
  for (double m = 1024; m < 4 << 20; m *= 1.1)  // no step: the search never jumps across one
    EXPECT_LE(streamedRoundBytes(m, slow), streamedRoundBytes(m * 1.1, slow)) << m;
  LinkModel plain = slow;
  plain.segmentBytes = 0;
  EXPECT_GT(bestComponents(8, bytes, size_t(16) << 20, plain), 200);
  for (const LinkModel& link : {slow, plain, LinkModel{20e-6, 1e-9, 0.1e-9, 256 * 1024},
                                LinkModel{2e-3, 8.0 / 1e9, 0, 64 * 1024}}) {
    for (double d : {double(1 << 20), double(16 << 20), bytes, double(256u << 20)}) {
      const int best = bestComponents(8, d, size_t(d / 4), link);
      EXPECT_EQ(best % 8, 0);
      for (int other = 8; other <= 4096; other += 8)
        EXPECT_LE(cerarSeconds(8, best, d, link), cerarSeconds(8, other, d, link) * (1 + 1e-9))
            << "d " << d << " c " << best << " vs " << other;
    }
  }
}

// The probe's CERAR rounds (LinkModel::rounds) as measured at 200 Mbit/s on the emulated
// cluster (2 cores): a per-round floor of about 430 us at N = 8 (190 us at N = 4) up to 4 KiB
// messages, then their bytes at 42 ns/B.
LinkModel measuredLink(int N) {
  LinkModel link{N == 8 ? 218e-6 : 83e-6, 42e-9, 0.1e-9};
  const double n8[] = {426e-6, 434e-6, 693e-6}, n4[] = {190e-6, 213e-6, 690e-6};
  for (int i = 0; i < 3; ++i)
    link.rounds.push_back({double(1024 << (2 * i)), N == 8 ? n8[i] : n4[i]});
  return link;
}

TEST(Selection, MeasuredRoundsInterpolateAndReplaceTheSegmentTerm) {
  const LinkModel link = measuredLink(8);
  for (const auto& point : link.rounds)
    EXPECT_DOUBLE_EQ(transferSeconds(point.bytes, link), point.seconds);
  EXPECT_DOUBLE_EQ(transferSeconds(0, link), link.alpha);
  EXPECT_DOUBLE_EQ(transferSeconds(10 << 10, link), (434e-6 + 693e-6) / 2);
  EXPECT_DOUBLE_EQ(transferSeconds(64 << 10, link), 4 * 693e-6);  // the last point's rate
  EXPECT_DOUBLE_EQ(arithmeticBytes(256 << 10, link), 256 << 10);  // no segment term
  for (double m = 1024; m < 16 << 20; m *= 1.1)
    EXPECT_LE(transferSeconds(m, link), transferSeconds(m * 1.1, link)) << m;
}

// Where the per-round floor gives way to the bytes (16 KiB here), a round costs the least for
// its bytes; beyond, the modelled time is nearly flat and c is the smallest within 0.5 % of
// the fastest: messages never on the floor (where more rounds only add time), and from 16 MiB
// well past its end, toward where the emulated cluster's runs were fastest (N = 8: c = 1024 at
// 64 MiB, 512 at 16 MiB, 64 at 1 MiB: 64, 32 and 16 KiB messages).
TEST(Selection, MeasuredRoundsPutMessagesPastTheFloorsEnd) {
  for (int N : {4, 8}) {
    const LinkModel link = measuredLink(N);
    for (double d : {double(1 << 20), double(4 << 20), double(16 << 20), double(64 << 20)}) {
      const int c = bestComponents(N, d, size_t(d / 4), link);
      double fastest = 1e300;
      for (int other = N; other <= 16384; other += N)
        fastest = std::min(fastest, cerarSeconds(N, other, d, link));
      EXPECT_GE(d / c, 15 << 10) << N << " " << d << " c " << c;
      if (d >= 16 << 20) {
        EXPECT_GE(d / c, 24 << 10) << N << " " << d << " c " << c;
      }
      EXPECT_LE(cerarSeconds(N, c, d, link), (1 + kComponentsTolerance) * fastest);
      EXPECT_GT(cerarSeconds(N, c - N, d, link), (1 + kComponentsTolerance) * fastest);
    }
  }
  EXPECT_EQ(bestComponents(8, double(1 << 20), 1 << 18, measuredLink(8)), 64);
  // The ring's long messages at the last point's rate; CERAR where it pays.
  EXPECT_EQ(selectAlgorithm(8, DType::kFloat32, ReduceOp::kSum, size_t(1) << 20,
                            measuredLink(8), SelectionPolicy{}).algorithm, Algorithm::kCerar);
}

// The executor streams a round as whole segments and a partial last one, which costs a wait and
// a post like a whole one: with measured rounds a message longer than a segment is charged its
// segments whole, so c lands on messages of whole segments (N = 4, 32 KiB segments: 512 at 16
// and 64 MiB, one and four segments, the grid's fastest on the emulated cluster; 288 and 368
// without the charge).
TEST(Selection, MeasuredRoundsChargeWholeSegments) {
  LinkModel link = measuredLink(4);
  link.segmentBytes = 32 << 10;
  EXPECT_DOUBLE_EQ(transferSeconds(33 << 10, link), transferSeconds(64 << 10, link));
  EXPECT_DOUBLE_EQ(transferSeconds(32 << 10, link), 2 * 690e-6);
  EXPECT_LT(transferSeconds(31 << 10, link), transferSeconds(32 << 10, link));
  EXPECT_DOUBLE_EQ(arithmeticBytes(33 << 10, link), 33 << 10);  // the codec's are the message's
  for (double d : {double(16 << 20), double(64 << 20)}) {
    const int c = bestComponents(4, d, size_t(d / 4), link);
    EXPECT_EQ(c, 512) << d;
    EXPECT_EQ(std::fmod(d / c, link.segmentBytes), 0.0) << d;
  }
  link.segmentBytes = 0;  // no segments: messages cost their bytes
  EXPECT_EQ(bestComponents(4, double(16 << 20), 1 << 22, link), 288);
  EXPECT_EQ(bestComponents(4, double(64 << 20), 1 << 24, link), 368);
}

// Each choice's own CPU cost, plain figures: the ring's add (gammaRing) is cheaper than CERAR's
// codec (gamma). Where the CPU bounds a round (a fast link) the ring, which sends twice the
// bytes, wins; where the link does, CERAR. With one gamma for both (gammaRing 0) CERAR's fewer
// bytes always win at 16 MiB: the model that chose CERAR on loopback.
TEST(Selection, EachChoicesOwnCpuCostDecidesOnPlainFigures) {
  const size_t elements = size_t(4) << 20;  // 16 MiB of float32
  const SelectionPolicy automatic;
  LinkModel cpuBound{1e-7, 0.1e-9, 1.0e-9};
  cpuBound.gammaRing = 0.2e-9;
  LinkModel oneGamma = cpuBound;
  oneGamma.gammaRing = 0;
  LinkModel linkBound = cpuBound;
  linkBound.beta = 40e-9;
  for (int N : {4, 8}) {
    const Selection cpu = selectAlgorithm(N, DType::kFloat32, ReduceOp::kSum, elements,
                                          cpuBound, automatic);
    EXPECT_EQ(cpu.algorithm, Algorithm::kRing) << N;
    EXPECT_LT(ringSeconds(N, 4.0 * elements, cpuBound),
              cerarSeconds(N, bestComponents(N, 4.0 * elements, elements, cpuBound),
                           4.0 * elements, cpuBound)) << N;
    EXPECT_EQ(selectAlgorithm(N, DType::kFloat32, ReduceOp::kSum, elements, oneGamma,
                              automatic).algorithm, Algorithm::kCerar) << N;
    EXPECT_EQ(selectAlgorithm(N, DType::kFloat32, ReduceOp::kSum, elements, linkBound,
                              automatic).algorithm, Algorithm::kCerar) << N;
  }
  EXPECT_DOUBLE_EQ(ringRoundSeconds(1 << 20, cpuBound),
                   transferSeconds(1 << 20, cpuBound) + (1 << 20) * 0.2e-9);
  EXPECT_DOUBLE_EQ(cerarRoundSeconds(1 << 20, cpuBound),
                   transferSeconds(1 << 20, cpuBound) + (1 << 20) * 1.0e-9);
}

// Curves shaped as the probe measures them (us per round by message bytes, arithmetic in
// them): `perByte` ns/B for each choice above a 30 us floor.
std::vector<LinkModel::RoundPoint> curve(double floor, double perByte) {
  std::vector<LinkModel::RoundPoint> points;
  for (double bytes = 1024; bytes <= 1 << 20; bytes *= 4)
    points.push_back({bytes, std::max(floor, bytes * perByte * 1e-9)});
  return points;
}

// Measured curves, one per choice: on loopback (CPU-bound: the ring's rounds at 0.3 ns/B,
// CERAR's at 0.6 with its encode and decode) the ring; on a 1 Gbit/s link (8 ns/B for both,
// CERAR's codec hidden under the link) CERAR; CERAR's c still lands past the floor's end.
TEST(Selection, EachChoicesMeasuredCurveDecides) {
  const size_t elements = size_t(16) << 20;  // 64 MiB of float32
  LinkModel loopback{20e-6, 0.3e-9, 0.3e-9};
  loopback.rounds = curve(30e-6, 0.6);
  loopback.ringRounds = curve(30e-6, 0.3);
  loopback.wireRounds = curve(30e-6, 0.5);
  LinkModel slow = loopback;
  slow.rounds = curve(60e-6, 8.2);
  slow.ringRounds = curve(60e-6, 8.0);
  slow.wireRounds = curve(60e-6, 8.0);  // per 16-bit byte: half the ring's bytes
  for (int N : {4, 8}) {
    const double d = 4.0 * elements;
    EXPECT_DOUBLE_EQ(ringSeconds(N, d, loopback),
                     2.0 * (N - 1) * measuredRoundSeconds(d / N, loopback.ringRounds, loopback));
    EXPECT_EQ(selectAlgorithm(N, DType::kFloat32, ReduceOp::kSum, elements, loopback,
                              SelectionPolicy{}).algorithm, Algorithm::kRing) << N;
    const Selection s =
        selectAlgorithm(N, DType::kFloat32, ReduceOp::kSum, elements, slow, SelectionPolicy{});
    EXPECT_EQ(s.algorithm, Algorithm::kCerar) << N;
    EXPECT_GE(d / s.components, 30e-6 / 8.2e-9) << N << " c " << s.components;
    // Without its own curve the ring takes CERAR's: loopback's CERAR wins again.
    LinkModel noRing = loopback;
    noRing.ringRounds.clear();
    EXPECT_EQ(selectAlgorithm(N, DType::kFloat32, ReduceOp::kSum, elements, noRing,
                              SelectionPolicy{}).algorithm, Algorithm::kCerar) << N;
  }
}

// The 16-bit wires by their own cost, within a budget that admits them: a CPU-bound wire hop
// (casts dearer than the bytes they save) leaves the float32 ring; a link-bound one takes the
// fp16 wire. Plain figures (gammaWire) and measured curves (wireRounds) alike.
TEST(Selection, WireRingsByTheirOwnCost) {
  BudgetQuery query{4, DType::kFloat32, ReduceOp::kSum, size_t(16) << 20, true};
  SelectionPolicy budget;
  budget.maxError = 5e-3;  // fp16's bound at N = 4 fits
  budget.allowFp16 = true;
  LinkModel cpuBound{1e-7, 0.1e-9, 1.0e-9};
  cpuBound.gammaRing = 0.2e-9;
  cpuBound.gammaWire = 0.5e-9;  // per float32 byte
  LinkModel linkBound = cpuBound;
  linkBound.beta = 40e-9;
  EXPECT_EQ(selectWithinBudget(query, cpuBound, budget).wire, Wire::kNone);
  EXPECT_EQ(selectWithinBudget(query, linkBound, budget).wire, Wire::kFloat16);
  LinkModel loopback{20e-6, 0.3e-9, 0.3e-9};
  loopback.rounds = curve(30e-6, 0.6);
  loopback.ringRounds = curve(30e-6, 0.3);
  loopback.wireRounds = curve(30e-6, 0.9);  // per 16-bit byte: 0.45 per float32 byte
  EXPECT_DOUBLE_EQ(wireRingSeconds(4, 64.0 * (1 << 20), loopback),
                   6 * measuredRoundSeconds(8 << 20, loopback.wireRounds, loopback));
  EXPECT_EQ(selectWithinBudget(query, loopback, budget).wire, Wire::kNone);
  LinkModel slow = loopback;
  slow.rounds = curve(60e-6, 8.2);
  slow.ringRounds = curve(60e-6, 8.0);
  slow.wireRounds = curve(60e-6, 8.0);
  EXPECT_EQ(selectWithinBudget(query, slow, budget).wire, Wire::kFloat16);
}

TEST(Selection, ForcedSettingsWinWhereCerarCanRun) {
  LinkModel link;
  SelectionPolicy forced;
  forced.algorithm = "cerar";
  forced.components = 12;
  forced.eps = 1e-3;
  Selection s = selectAlgorithm(4, DType::kFloat64, ReduceOp::kSum, 100, link, forced);
  EXPECT_EQ(s.algorithm, Algorithm::kCerar);
  EXPECT_EQ(s.components, 12);
  EXPECT_EQ(s.eps, 1e-3);
  EXPECT_EQ(selectAlgorithm(4, DType::kFloat32, ReduceOp::kMin, 100, link, forced).algorithm,
            Algorithm::kRing);
  SelectionPolicy ring;
  ring.algorithm = "ring";
  EXPECT_EQ(selectAlgorithm(16, DType::kFloat32, ReduceOp::kSum, 1u << 28, link, ring).algorithm,
            Algorithm::kRing);
}

}  // namespace
}  // namespace cerar
