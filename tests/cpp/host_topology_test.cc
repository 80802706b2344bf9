// Which ranks share a host (core/config/host_topology.h): the local and cross groups, the
// layered condition and rank 0's posted table.
#include <gtest/gtest.h>

#include "common/error.h"
#include "core/config/host_topology.h"

namespace cerar {
namespace {

TEST(HostTopology, HostsNumberedByTheirLowestRankWhateverTheOrder) {
  const HostTopology t = topologyOf({"b", "a", "b", "c", "a", "c"});
  EXPECT_EQ(t.hostOf, (std::vector<int>{0, 1, 0, 2, 1, 2}));
  EXPECT_EQ(t.hosts(), 3);
  EXPECT_EQ(t.localMembers(4), (std::vector<int>{1, 4}));
  EXPECT_EQ(t.localRank(4), 1);
  EXPECT_EQ(t.localSize(4), 2);
  // Local rank 1 is ranks 2, 4 and 5, one per host, in rank order.
  EXPECT_EQ(t.crossMembers(4), (std::vector<int>{2, 4, 5}));
  EXPECT_EQ(t.crossRank(4), 1);
  EXPECT_EQ(t.crossSize(0), 3);
  EXPECT_TRUE(t.homogeneous());
  EXPECT_TRUE(t.layered());
}

TEST(HostTopology, UnevenHostsAreNotLayered) {
  const HostTopology t = topologyOf({"a", "a", "a", "b"});
  EXPECT_FALSE(t.homogeneous());
  EXPECT_FALSE(t.layered());
  EXPECT_EQ(t.crossMembers(1), (std::vector<int>{1}));  // host b has no local rank 1
  EXPECT_EQ(t.crossSize(0), 2);
  EXPECT_EQ(t.crossRank(3), 1);
}

TEST(HostTopology, OneHostOrOneRankPerHostIsNotLayered) {
  EXPECT_FALSE(topologyOf({"a", "a", "a"}).layered());
  const HostTopology apart = topologyOf({"a", "b", "c"});
  EXPECT_TRUE(apart.homogeneous());
  EXPECT_FALSE(apart.layered());
  EXPECT_EQ(apart.crossRank(2), 2);
  EXPECT_EQ(apart.localSize(2), 1);
}

TEST(HostTopology, PostedTableRoundTripsAndMalformedOnesThrow) {
  const HostTopology t = topologyOf({"x", "y", "x", "y"});
  EXPECT_EQ(t.text(), "0 1 0 1");
  EXPECT_EQ(parseTopology(t.text(), 4).hostOf, t.hostOf);
  EXPECT_THROW(parseTopology("0 1 0", 4), Error);    // another size
  EXPECT_THROW(parseTopology("0 2 1 1", 4), Error);  // host 2 before host 1
  EXPECT_THROW(parseTopology("0 x 1 1", 4), Error);
}

TEST(HostTopology, BlocksOfTheDeclaredSize) {
  EXPECT_EQ(blockTopology(6, 2).hostOf, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(blockTopology(5, 2).hostOf, (std::vector<int>{0, 0, 0, 0, 0}));
  EXPECT_EQ(blockTopology(3, 3).hosts(), 1);
}

}  // namespace
}  // namespace cerar
