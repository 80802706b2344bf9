// The link probe: CERAR's, the exact ring's and the fp16 wire ring's rounds from 1 KiB
// messages up, every rank with the same figures (each the slowest rank's).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <thread>
#include <vector>

#include "core/policy/link_probe.h"
#include "ops/paced_link.h"
#include "ops/transport/inproc.h"
#include "ops/transport/subset.h"

namespace cerar {
namespace {

TEST(LinkProbe, CerarRoundsAndOneSetOfFiguresOnEveryRank) {
  constexpr int N = 4;
  InprocHub hub(N, std::chrono::seconds(20));
  std::vector<LinkModel> links(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank)
    threads.emplace_back([&, rank] { links[rank] = probeLink(*hub.connect(rank)); });
  for (auto& thread : threads) thread.join();

  const LinkModel& link = links[0];
  // 1 KiB, 4 KiB, ... (and the segment of the window chosen) until the rounds cost their
  // bytes, at most 1 MiB.
  const auto sizes = probeMessageSizes(pacingFor(size_t(link.windowBytes)).segmentBytes);
  ASSERT_GE(link.rounds.size(), 1u);
  ASSERT_LE(link.rounds.size(), sizes.size());
  for (size_t i = 0; i < link.rounds.size(); ++i) {
    EXPECT_EQ(link.rounds[i].bytes, double(sizes[i]));
    EXPECT_GT(link.rounds[i].seconds, 0);
    if (i) {
      EXPECT_GE(link.rounds[i].seconds, link.rounds[i - 1].seconds);
    }
  }
  // Each choice's own curve at the same messages (its arithmetic included).
  for (const auto* curve : {&link.ringRounds, &link.wireRounds}) {
    ASSERT_EQ(curve->size(), link.rounds.size());
    for (size_t i = 0; i < curve->size(); ++i) {
      EXPECT_EQ((*curve)[i].bytes, link.rounds[i].bytes);
      EXPECT_GT((*curve)[i].seconds, 0);
      if (i) {
        EXPECT_GE((*curve)[i].seconds, (*curve)[i - 1].seconds);
      }
    }
  }
  EXPECT_GT(link.alpha, 0);
  EXPECT_GT(link.beta, 0);
  EXPECT_GT(link.gamma, 0);
  for (const LinkModel& other : links) {  // bit for bit: selection must agree everywhere
    EXPECT_EQ(other.alpha, link.alpha);
    EXPECT_EQ(other.beta, link.beta);
    EXPECT_EQ(other.gamma, link.gamma);
    EXPECT_EQ(other.gammaWire, link.gammaWire);
    EXPECT_EQ(other.windowBytes, link.windowBytes);
    ASSERT_EQ(other.rounds.size(), link.rounds.size());
    for (size_t i = 0; i < link.rounds.size(); ++i) {
      EXPECT_EQ(other.rounds[i].bytes, link.rounds[i].bytes);
      EXPECT_EQ(other.rounds[i].seconds, link.rounds[i].seconds);
      EXPECT_EQ(other.ringRounds[i].seconds, link.ringRounds[i].seconds);
      EXPECT_EQ(other.wireRounds[i].seconds, link.wireRounds[i].seconds);
    }
  }
}

// The segment is probed where the powers of 4 from 1 KiB miss it (a round's cost bends there).
TEST(LinkProbe, SizesIncludeTheSegment) {
  const std::vector<size_t> plain = {1u << 10, 4u << 10, 16u << 10, 64u << 10, 256u << 10,
                                     1u << 20};
  EXPECT_EQ(probeMessageSizes(256u << 10), plain);  // no window: 256 KiB segments
  EXPECT_EQ(probeMessageSizes(16u << 10), plain);   // a 32 KiB window
  EXPECT_EQ(probeMessageSizes(32u << 10),           // a 64 KiB window
            (std::vector<size_t>{1u << 10, 4u << 10, 16u << 10, 32u << 10, 64u << 10,
                                 256u << 10, 1u << 20}));
  EXPECT_EQ(probeMessageSizes(4u << 20), plain);  // past the last size: nothing to add
}

// Every rank ends with each figure's largest value, whichever rank measured it.
TEST(LinkProbe, EveryRankHoldsTheSlowestRanksFigures) {
  constexpr int N = 3;
  InprocHub hub(N, std::chrono::seconds(20));
  std::vector<std::vector<double>> got(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      const std::vector<double> mine = {double(rank), 10.0 - rank, rank == 1 ? 7.5 : 0.25};
      got[rank] = slowestOverRanks(*hub.connect(rank), mine);
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& values : got) EXPECT_EQ(values, (std::vector<double>{2.0, 10.0, 7.5}));
}

// A window where the free stream lost packets and was slow; none where it was CPU-bound, lost
// nothing, or the window was measurably slower (docs/pacing.md, "Who chooses").
TEST(LinkProbe, WindowOnlyWhereTheFreeStreamLostPackets) {
  const size_t bytes = 2u << 20;
  const double slow = double(bytes) / 60e6;  // 60 MB/s, as a lossy 1 Gbit/s link
  EXPECT_TRUE(windowWorthIt({bytes, slow, slow * 1.04, 30}));
  EXPECT_TRUE(windowWorthIt({bytes, slow, slow * 0.5, 8}));
  EXPECT_FALSE(windowWorthIt({bytes, slow, slow * 1.06, 300}));  // measurably slower
  EXPECT_FALSE(windowWorthIt({bytes, slow, slow * 0.9, 7}));      // nothing to cure
  const double fast = double(bytes) / 140e6;  // CPU-bound
  EXPECT_FALSE(windowWorthIt({bytes, fast, fast * 0.7, 50}));
}

// A free stream past 100 MB/s is bound by the CPU (receives then go in step), below it by a
// queue.
TEST(LinkProbe, CpuBoundStreamIsAFreeStreamPast100MBps) {
  const size_t bytes = 2 << 20;
  EXPECT_TRUE(cpuBoundStream({bytes, bytes / 150e6, 1, 0}));
  EXPECT_FALSE(cpuBoundStream({bytes, bytes / 60e6, 1, 0}));
  EXPECT_FALSE(cpuBoundStream({bytes, bytes / 90e6, 0, 50}));
}

TEST(LinkProbe, OneRankMeasuresNothing) {
  InprocHub hub(1, std::chrono::seconds(5));
  const LinkModel link = probeLink(*hub.connect(0));
  EXPECT_TRUE(link.rounds.empty());
  EXPECT_TRUE(link.ringRounds.empty());
  EXPECT_TRUE(link.wireRounds.empty());
}

// A layered job's local step (2 hosts of 2): every rank ends with the same non-negative figures,
// and they replace the defaults.
TEST(LinkProbe, LocalStepFiguresAgreedOnEveryRank) {
  const int N = 4;
  InprocHub hub(N, std::chrono::seconds(20));
  std::vector<LinkModel> links(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      std::shared_ptr<Transport> base = hub.connect(rank);
      const int host = rank / 2;
      auto local = std::make_shared<SubsetTransport>(base->channel(1),
                                                     std::vector<int>{2 * host, 2 * host + 1});
      links[rank].localAlpha = links[rank].localBeta = -1;
      probeLocalStep(local, *base, links[rank]);
    });
  }
  for (auto& t : threads) t.join();
  for (const LinkModel& link : links) {
    EXPECT_EQ(link.localAlpha, links[0].localAlpha);
    EXPECT_EQ(link.localBeta, links[0].localBeta);
    EXPECT_GE(link.localAlpha, 0);
    EXPECT_GE(link.localBeta, 0);
    EXPECT_LT(link.localAlpha + 4e6 * link.localBeta, 5.0);  // seconds: measured, not a sentinel
  }
}

}  // namespace
}  // namespace cerar
