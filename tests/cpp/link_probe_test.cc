// The link probe: CERAR rounds from 1 KiB messages up, every rank with rank 0's figures.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/link_probe.h"
#include "ops/transport/inproc.h"

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
  // 1 KiB, 4 KiB, ... until the rounds cost their bytes, at most 1 MiB.
  ASSERT_GE(link.rounds.size(), 1u);
  ASSERT_LE(link.rounds.size(), 6u);
  for (size_t i = 0; i < link.rounds.size(); ++i) {
    EXPECT_EQ(link.rounds[i].bytes, double(1024u << (2 * i)));
    EXPECT_GT(link.rounds[i].seconds, 0);
    if (i) {
      EXPECT_GE(link.rounds[i].seconds, link.rounds[i - 1].seconds);
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
    }
  }
}

TEST(LinkProbe, OneRankMeasuresNothing) {
  InprocHub hub(1, std::chrono::seconds(5));
  EXPECT_TRUE(probeLink(*hub.connect(0)).rounds.empty());
}

}  // namespace
}  // namespace cerar
