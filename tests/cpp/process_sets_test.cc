// Process sets' pure parts: the set table, c per set, the rank-translating view of the links,
// readiness keyed by (set, name) in negotiation, and fusion never mixing sets.
#include <gtest/gtest.h>

#include <thread>

#include "core/policy/fusion.h"
#include "runtime_scenarios.h"
#include "core/control/negotiation.h"
#include "core/control/process_sets.h"
#include "ops/collectives.h"
#include "common/error.h"
#include "ops/transport/inproc.h"
#include "ops/transport/subset.h"

namespace cerar {
namespace {

Request inSet(const std::string& name, int32_t set, std::vector<int64_t> shape = {4}) {
  Request r;
  r.names = {name};
  r.description.shapes = {std::move(shape)};
  r.description.processSet = set;
  return r;
}

RequestMessage messageOf(std::vector<Request> requests) {
  RequestMessage m;
  m.requests = std::move(requests);
  return m;
}

TEST(RuntimeProcessSets, TableNumbersSetsAndMapsRanks) {
  ProcessSetTable table(4);
  ASSERT_TRUE(table.find(0));
  EXPECT_EQ(table.find(0)->ranks, (std::vector<int>{0, 1, 2, 3}));
  const int32_t odd = table.add({1, 3});
  const int32_t three = table.add({0, 1, 3});
  EXPECT_EQ(odd, 1);
  EXPECT_EQ(three, 2);
  EXPECT_EQ(table.find(three)->rankOf(3), 2);
  EXPECT_EQ(table.find(three)->rankOf(2), -1);
  EXPECT_EQ(table.idOf({1, 3}), odd);
  EXPECT_TRUE(table.remove(odd));
  EXPECT_FALSE(table.remove(odd));
  EXPECT_FALSE(table.remove(0));
  EXPECT_FALSE(table.find(odd));
  EXPECT_EQ(table.add({1, 3}), 3);  // ids are never reused
}

TEST(RuntimeProcessSets, RanksAreCheckedAndCIsAMultipleOfTheSetSize) {
  EXPECT_TRUE(checkSetRanks({2, 0}, 4).ok());
  EXPECT_FALSE(checkSetRanks({}, 4).ok());
  EXPECT_FALSE(checkSetRanks({0, 4}, 4).ok());
  EXPECT_FALSE(checkSetRanks({1, 1}, 4).ok());
  EXPECT_EQ(componentsForSet(8, 4), 8);
  EXPECT_EQ(componentsForSet(8, 3), 9);
  EXPECT_EQ(componentsForSet(8, 2), 8);
  EXPECT_EQ(componentsForSet(0, 3), 0);  // the cost model decides
}

TEST(RuntimeProcessSets, AChangeAddsOrRemovesAlikeOrSaysWhyNot) {
  ProcessSetTable table(4);
  const SetChange added = applySetChange(table, 0, {3, 1});
  EXPECT_TRUE(added.outcome.ok());
  EXPECT_FALSE(added.removed);
  EXPECT_EQ(table.find(added.id)->ranks, (std::vector<int>{1, 3}));
  const SetChange again = applySetChange(table, 0, {1, 3});
  EXPECT_EQ(again.outcome.code, StatusCode::kInvalidArgument);
  EXPECT_NE(again.outcome.message.find("exists already (id 1)"), std::string::npos);
  EXPECT_EQ(applySetChange(table, 0, {0, 4}).outcome.code, StatusCode::kInvalidArgument);
  const SetChange removed = applySetChange(table, added.id, {});
  EXPECT_TRUE(removed.outcome.ok() && removed.removed);
  EXPECT_EQ(removed.id, added.id);
  const SetChange missing = applySetChange(table, added.id, {});
  EXPECT_FALSE(missing.removed);
  EXPECT_EQ(missing.outcome.code, StatusCode::kInvalidArgument);
}

TEST(RuntimeProcessSets, SubsetViewTranslatesRanksOverSharedLinks) {
  // Ranks 1 and 3 of 4 allgather among themselves as ranks 0 and 1 of the view, while
  // ranks 0 and 2 do the same in theirs over the same hub.
  InprocHub hub(4, std::chrono::milliseconds(20000));
  std::vector<std::vector<int>> gathered(4);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] {
      std::shared_ptr<Transport> base = hub.connect(rank);
      const std::vector<int> members = rank % 2 ? std::vector<int>{1, 3} : std::vector<int>{0, 2};
      SubsetTransport view(base, members);
      EXPECT_EQ(view.size(), 2);
      EXPECT_EQ(view.rank(), rank / 2);
      EXPECT_EQ(view.baseRank(1), members[1]);
      std::vector<int> buffer(2, -1);
      buffer[size_t(view.rank())] = rank * 10;
      ringAllgather(view, buffer.data(), {sizeof(int), sizeof(int)});
      gathered[size_t(rank)] = buffer;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(gathered[1], (std::vector<int>{10, 30}));
  EXPECT_EQ(gathered[3], (std::vector<int>{10, 30}));
  EXPECT_EQ(gathered[0], (std::vector<int>{0, 20}));
  EXPECT_EQ(gathered[2], (std::vector<int>{0, 20}));
  std::shared_ptr<Transport> outsider = hub.connect(0);
  EXPECT_THROW(SubsetTransport(outsider, {1, 3}), Error);
}

TEST(RuntimeProcessSets, ReadyWhenTheSetsMembersSubmittedEachNameOncePerSet) {
  ProcessSetTable sets(4);
  const int32_t odd = sets.add({1, 3});
  const int32_t low = sets.add({0, 1, 2});
  NegotiationTable table(4, &sets);
  ResponseCache cache(0);
  const auto now = NegotiationTable::Clock::now();
  // One name in two sets and in set 0: three units.
  table.receive(1, messageOf({inSet("g", odd), inSet("g", low), inSet("g", 0)}), cache, now);
  table.receive(3, messageOf({inSet("g", odd)}), cache, now);
  auto answer = table.decide(cache);
  ASSERT_EQ(answer.responses.size(), 1u);
  EXPECT_EQ(answer.responses[0].description.processSet, odd);
  table.receive(0, messageOf({inSet("g", low), inSet("g", 0)}), cache, now);
  EXPECT_TRUE(table.decide(cache).responses.empty());
  const auto waiting = table.waiting();
  ASSERT_EQ(waiting.size(), 2u);
  for (const auto& w : waiting) {
    const std::vector<int> expected =
        w.key == inSet("g", low).key() ? std::vector<int>{2} : std::vector<int>{2, 3};
    EXPECT_EQ(w.missingRanks, expected);
  }
  table.receive(2, messageOf({inSet("g", low)}), cache, now);
  answer = table.decide(cache);
  ASSERT_EQ(answer.responses.size(), 1u);
  EXPECT_EQ(answer.responses[0].description.processSet, low);
}

TEST(RuntimeProcessSets, MismatchAndAllgatherRowsAreTheSetsOwn) {
  ProcessSetTable sets(4);
  const int32_t odd = sets.add({1, 3});
  NegotiationTable table(4, &sets);
  ResponseCache cache(0);
  const auto now = NegotiationTable::Clock::now();
  Request gather = inSet("rows", odd, {2, 5});
  gather.description.kind = Kind::kAllgather;
  table.receive(1, messageOf({gather, inSet("w", odd, {4})}), cache, now);
  gather.description.shapes = {{7, 5}};
  table.receive(3, messageOf({gather, inSet("w", odd, {5})}), cache, now);
  const auto answer = table.decide(cache);
  ASSERT_EQ(answer.responses.size(), 2u);
  EXPECT_EQ(answer.responses[0].firstDims, (std::vector<int64_t>{2, 7}));  // by set rank
  EXPECT_NE(answer.responses[1].error.find("rank 3 submitted"), std::string::npos)
      << answer.responses[1].error;
  // A rank outside the set is refused (enqueue refuses it first; this is the table's guard).
  table.receive(0, messageOf({inSet("x", odd)}), cache, now);
  const auto refused = table.decide(cache);
  ASSERT_EQ(refused.responses.size(), 1u);
  EXPECT_EQ(refused.responses[0].errorCode, StatusCode::kInvalidArgument);
}

TEST(RuntimeProcessSets, FusionNeverMixesSetsAndCFollowsTheSetSize) {
  std::vector<Response> units;
  for (int32_t set : {0, 1, 0, 1}) {
    Response r;
    r.names = {"t" + std::to_string(units.size())};
    r.description.shapes = {{1 << 20}};
    r.description.processSet = set;
    units.push_back(r);
  }
  EXPECT_EQ(planFusion(units, 64 << 20), (std::vector<std::vector<size_t>>{{0, 2}, {1, 3}}));
  SelectionPolicy forced;
  forced.algorithm = "cerar";
  forced.components = 8;
  const auto groups = decideGroups(unitRefs(units), [](int32_t set) { return set == 0 ? 4 : 3; },
                                   64 << 20, LinkModel{}, forced);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].components, 8);
  EXPECT_EQ(groups[1].components, 9);
}

// Four in-process runtimes: a set added while the global set reduces, one name in flight in
// both, the set's sum and average over its own ranks, a non-member refused, then removed.
TEST(RuntimeProcessSets, InprocRuntimesReduceInASetWhileOthersReduce) {
  using namespace scenarios;
  InprocHub hub(4, std::chrono::milliseconds(20000));
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto rt = Runtime::startWith(testConfig(), hub.connect(rank));
        std::vector<float> everyone(100, float(rank + 1));
        Handle global = rt->allreduce("x", f32(everyone), f32(everyone), Op::kSum);
        Handle added = rt->addProcessSet({3, 1});
        added.wait();
        const int32_t odd = added.processSetId();
        check(odd == 1 && rt->processSetRanks(odd) == std::vector<int>{1, 3}, "set ", odd);
        std::vector<float> mine(10, float(rank + 1));
        if (rank % 2 == 1) {
          rt->allreduce("x", f32(mine), f32(mine), Op::kSum, 1.0, 1.0, {}, Wire::kNone, odd)
              .wait();
          check(mine[0] == 2.0f + 4.0f, "set sum ", mine[0]);
          // The same unit again: answered from the set's response-cache entry.
          const uint64_t hits = rt->stats().cacheHits;
          for (int i = 0; i < 2; ++i) {
            rt->allreduce("y", f32(mine), f32(mine), Op::kAverage, 1.0, 1.0, {}, Wire::kNone,
                          odd).wait();
          }
          check(mine[9] == 6.0f, "set average ", mine[9]);
          check(rt->stats().cacheHits == hits + 1, "cache hits ", rt->stats().cacheHits);
        } else {
          const Status refused = outcome(
              rt->allreduce("x", f32(mine), f32(mine), Op::kSum, 1.0, 1.0, {}, Wire::kNone, odd));
          check(refused.code == StatusCode::kInvalidArgument &&
                    refused.message.find("is not in process set 1") != std::string::npos,
                refused.message);
        }
        global.wait();
        check(everyone[0] == 10.0f, "global sum ", everyone[0]);
        rt->removeProcessSet(odd).wait();
        check(!rt->processSetRanks(odd), "set still there after removal");
      } catch (const std::exception& e) {
        errors[size_t(rank)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(errors[size_t(rank)], "") << "rank " << rank;
}

}  // namespace
}  // namespace cerar
