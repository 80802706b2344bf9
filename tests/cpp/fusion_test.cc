// The fusion planner: which units share a buffer, and the decisions it carries.
#include <gtest/gtest.h>

#include <vector>

#include "core/policy/fusion.h"
#include "core/policy/selection.h"
#include "units.h"

namespace cerar {
namespace {

using testing::request;

Response allreduceUnit(const std::string& name, int64_t elements, DType dtype = DType::kFloat32) {
  Response r{{name}, request(name, {elements}).description, {}, "", {}};
  r.description.dtype = dtype;
  return r;
}

TEST(Fusion, PacksCompatibleUnitsUpToTheThreshold) {
  std::vector<Response> units = {allreduceUnit("a", 10), allreduceUnit("b", 10, DType::kFloat64),
                                 allreduceUnit("c", 10), allreduceUnit("big", 1000),
                                 allreduceUnit("d", 10)};
  Response gather = allreduceUnit("g", 4);
  gather.description.kind = Kind::kAllgather;
  units.push_back(gather);
  Response failed = allreduceUnit("e", 1);
  failed.error = "x";
  units.push_back(failed);
  auto groups = planFusion(units, 120);  // 30 f32 elements
  std::vector<std::vector<size_t>> expected = {{0, 2, 4}, {1}, {3}, {5}, {6}};
  EXPECT_EQ(groups, expected);
  EXPECT_EQ(planFusion(units, 0).size(), units.size());
  EXPECT_EQ(planFusion(units, 80), (std::vector<std::vector<size_t>>{{0, 2}, {1}, {3}, {4}, {5}, {6}}));
}

TEST(Fusion, ReducescattersFuseAmongThemselves) {
  auto scatter = [](const char* name, size_t n) {
    Response unit = allreduceUnit(name, n);
    unit.description.kind = Kind::kReducescatter;
    return unit;
  };
  std::vector<Response> units = {scatter("a", 10), allreduceUnit("b", 10), scatter("c", 10),
                                 allreduceUnit("d", 10)};
  EXPECT_EQ(planFusion(units, 120), (std::vector<std::vector<size_t>>{{0, 2}, {1, 3}}));
  // A reducescatter group carries the exact ring whatever the policy says.
  SelectionPolicy forced;
  forced.algorithm = "cerar";
  for (const FusedGroup& group : decideGroups(units, 4, 120, LinkModel{}, forced)) {
    if (units[group.members[0]].description.kind == Kind::kReducescatter) {
      EXPECT_EQ(group.algorithm, Algorithm::kRing);
    }
  }
}

// Fusion's decision is final: an Adasum group carries Algorithm::kAdasum at full width, whatever
// wire the job forces, and the dispatcher runs what it says.
TEST(Fusion, AdasumIsDecidedHereAtFullWidth) {
  Response adasum = allreduceUnit("a", 10);
  adasum.description.op = Op::kAdasum;
  std::vector<Response> units = {adasum, allreduceUnit("s", 10)};
  SelectionPolicy forced;
  forced.algorithm = "cerar";
  forced.wire = Wire::kInt8;
  const std::vector<FusedGroup> groups = decideGroups(units, 4, 1 << 20, LinkModel{}, forced);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].algorithm, Algorithm::kAdasum);
  EXPECT_EQ(groups[0].wire, Wire::kNone);
  EXPECT_EQ(groups[1].wire, Wire::kInt8);  // the sum takes the forced wire
  EXPECT_STREQ(algorithmName(groups[0].algorithm), "adasum");
  EXPECT_FALSE(wireMayCarry(Wire::kInt8, DType::kFloat32, Op::kAdasum));
  EXPECT_TRUE(wireMayCarry(Wire::kInt8, DType::kFloat32, Op::kAverage));
}

// A layered job (2 hosts of 4): "1" reduces set 0's host sums host by host with the step
// across hosts chosen for H = 2; "0" never; auto where the model predicts it faster; never for
// another process set; device memory only under "1".
TEST(DecideGroups, HostByHostWhereLayeredAndChosen) {
  const LinkModel slow{50e-6, 40e-9, 0.2e-9};  // 200 Mbit/s between hosts
  SelectionPolicy policy;
  policy.hosts = 2;
  policy.ranksPerHost = 4;
  const Response big = allreduceUnit("g", 16 << 20);
  policy.hierarchical = "1";
  FusedGroup group = decideGroups({big}, 8, 64u << 20, slow, policy).at(0);
  EXPECT_TRUE(group.hierarchical);
  EXPECT_EQ(group.algorithm, Algorithm::kRing);  // CERAR has nothing to save on 2 ranks
  EXPECT_EQ(group.components, 2);
  policy.hierarchical = "0";
  EXPECT_FALSE(decideGroups({big}, 8, 64u << 20, slow, policy).at(0).hierarchical);
  policy.hierarchical = "auto";
  EXPECT_TRUE(decideGroups({big}, 8, 64u << 20, slow, policy).at(0).hierarchical);
  // An approximate flat choice (CERAR on 8 ranks) must beat the exact host-by-host ring by
  // minGain.
  policy.minGain = 0.99;
  group = decideGroups({big}, 8, 64u << 20, slow, policy).at(0);
  EXPECT_TRUE(group.hierarchical);
  EXPECT_EQ(group.algorithm, Algorithm::kRing);
  policy.minGain = SelectionPolicy{}.minGain;
  // Forced CERAR runs across hosts with c a multiple of H.
  policy.algorithm = "cerar";
  policy.hosts = 4;
  policy.ranksPerHost = 2;
  group = decideGroups({big}, 8, 64u << 20, slow, policy).at(0);
  EXPECT_TRUE(group.hierarchical);
  EXPECT_EQ(group.algorithm, Algorithm::kCerar);
  EXPECT_EQ(group.components % 4, 0);
  policy.algorithm = "auto";
  // Fewer rounds across hosts pay for a small buffer too while the local ones are cheap; where
  // the host's own links are as slow as the network, the flat ring's fewer steps win.
  LinkModel fast{50e-6, 0.08e-9, 0.2e-9};
  const Response small = allreduceUnit("s", 1024);
  EXPECT_TRUE(decideGroups({small}, 8, 64u << 20, fast, policy).at(0).hierarchical);
  fast.localAlpha = 50e-6;
  fast.localBeta = 2e-9;
  EXPECT_FALSE(decideGroups({big}, 8, 64u << 20, fast, policy).at(0).hierarchical);
  Response inSet = big;
  inSet.description.processSet = 1;
  EXPECT_FALSE(decideGroups({inSet}, 8, 64u << 20, slow, policy).at(0).hierarchical);
  // Device buffers (NCCL inside each host, DeviceOps::allreduceByHost) only under "1": the
  // probe has not timed the GPUs' links.
  Response onDevice = big;
  onDevice.description.onDevice = true;
  EXPECT_FALSE(decideGroups({onDevice}, 8, 64u << 20, slow, policy).at(0).hierarchical);
  policy.hierarchical = "1";
  EXPECT_TRUE(decideGroups({onDevice}, 8, 64u << 20, slow, policy).at(0).hierarchical);
  policy.hierarchical = "auto";
  policy.hosts = 1;  // not layered
  EXPECT_FALSE(decideGroups({big}, 8, 64u << 20, slow, policy).at(0).hierarchical);
}

}  // namespace
}  // namespace cerar
