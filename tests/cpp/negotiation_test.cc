// Negotiation: its messages, the coordinator rank's table, cached units as bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/error.h"
#include "core/control/negotiation.h"
#include "core/control/response_cache.h"
#include "core/policy/fusion.h"
#include "units.h"

namespace cerar {
namespace {

using testing::request;

// The parameters in force travel in every response; a corrupt cycle time is refused.
TEST(Negotiation, TuningTravelsInTheResponse) {
  ResponseMessage m;
  m.tuning = {TuningPoint{3u << 20, 2.5, 0.5}, true, false};
  EXPECT_EQ(decodeResponseMessage(encode(m)).tuning, m.tuning);
  m.tuning = {TuningPoint{0, 20, 4}, false, true};
  EXPECT_EQ(decodeResponseMessage(encode(m)).tuning, m.tuning);
  m.tuning.point.cycleTimeMs = 0;
  EXPECT_THROW(decodeResponseMessage(encode(m)), Error);
}

RequestMessage messageOf(std::vector<Request> requests) {
  RequestMessage m;
  m.requests = std::move(requests);
  return m;
}

TEST(Negotiation, MessagesRoundTripAndRejectTruncation) {
  RequestMessage m = messageOf({request("a", {3, 4}), request("b", {})});
  m.shutdown = true;
  setBit(m.cacheBits, 9);
  m.requests[1].names.push_back("c");
  m.requests[1].description.prescale = 0.5;
  auto bytes = encode(m);
  RequestMessage back = decodeRequestMessage(bytes);
  EXPECT_TRUE(back.shutdown);
  EXPECT_FALSE(back.join);
  EXPECT_EQ(setBits(back.cacheBits), std::vector<size_t>{9});
  ASSERT_EQ(back.requests.size(), 2u);
  EXPECT_EQ(back.requests[0], m.requests[0]);
  EXPECT_EQ(back.requests[1], m.requests[1]);
  bytes.pop_back();
  EXPECT_THROW(decodeRequestMessage(bytes), Error);

  ResponseMessage r;
  r.lastJoinedRank = 3;
  Response unit{{"x"}, request("x", {2}).description, {1, 2}, "boom", {}};
  r.responses = {unit};
  ResponseMessage rback = decodeResponseMessage(encode(r));
  EXPECT_EQ(rback.lastJoinedRank, 3);
  ASSERT_EQ(rback.responses.size(), 1u);
  EXPECT_EQ(rback.responses[0], unit);
}

TEST(Negotiation, ReadyOnlyWhenEveryRankSubmittedInFirstSeenOrder) {
  NegotiationTable table(3);
  ResponseCache cache(0);
  const auto now = NegotiationTable::Clock::now();
  table.receive(0, messageOf({request("b", {2}), request("a", {2})}), cache, now);
  table.receive(1, messageOf({request("a", {2}), request("b", {2})}), cache, now);
  EXPECT_TRUE(table.decide(cache).responses.empty());
  table.receive(2, messageOf({request("a", {2})}), cache, now);
  auto answer = table.decide(cache);
  ASSERT_EQ(answer.responses.size(), 1u);
  EXPECT_EQ(answer.responses[0].names[0], "a");
  table.receive(2, messageOf({request("b", {2})}), cache, now);
  ASSERT_EQ(table.decide(cache).responses.size(), 1u);
}

TEST(Negotiation, MismatchNamesTensorRanksAndBothDescriptions) {
  NegotiationTable table(3);
  ResponseCache cache(0);
  const auto now = NegotiationTable::Clock::now();
  table.receive(0, messageOf({request("w", {4, 3})}), cache, now);
  table.receive(1, messageOf({request("w", {4, 3})}), cache, now);
  table.receive(2, messageOf({request("w", {5, 3})}), cache, now);
  auto answer = table.decide(cache);
  ASSERT_EQ(answer.responses.size(), 1u);
  const std::string& error = answer.responses[0].error;
  EXPECT_NE(error.find("'w'"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 0 submitted allreduce f32 sum shape [4, 3]"), std::string::npos)
      << error;
  EXPECT_NE(error.find("rank 2 submitted allreduce f32 sum shape [5, 3]"), std::string::npos)
      << error;
}

TEST(Negotiation, AllgatherRowsMayDifferAndJoinedRanksCountAsReady) {
  NegotiationTable table(3);
  ResponseCache cache(0);
  const auto now = NegotiationTable::Clock::now();
  RequestMessage join;
  join.join = true;
  for (int rank = 0; rank < 3; ++rank) {
    table.receive(rank, messageOf({request("g", {rank + 1, 2}, Kind::kAllgather)}), cache, now);
  }
  auto gathered = table.decide(cache);
  ASSERT_EQ(gathered.responses.size(), 1u);
  EXPECT_TRUE(gathered.responses[0].error.empty()) << gathered.responses[0].error;
  EXPECT_EQ(gathered.responses[0].firstDims, (std::vector<int64_t>{1, 2, 3}));
  // A joined rank counts as ready, and an allgather or broadcast then fails (as Horovod's).
  table.receive(0, messageOf({request("h", {1, 2}, Kind::kAllgather)}), cache, now);
  table.receive(1, messageOf({request("h", {3, 2}, Kind::kAllgather)}), cache, now);
  table.receive(2, join, cache, now);
  auto answer = table.decide(cache);
  ASSERT_EQ(answer.responses.size(), 1u);
  EXPECT_NE(answer.responses[0].error.find("rank 2 has joined"), std::string::npos)
      << answer.responses[0].error;
  EXPECT_EQ(answer.responses[0].errorCode, StatusCode::kInvalidArgument);
  EXPECT_EQ(answer.responses[0].errorPeer, 2);
  EXPECT_EQ(answer.lastJoinedRank, -1);
  table.receive(0, join, cache, now);
  table.receive(1, join, cache, now);
  EXPECT_EQ(table.decide(cache).lastJoinedRank, 1);  // the last of the cycle's joiners
}

// A cache of `names`' units of shape {2}, as every rank holds it after they ran.
struct CachedUnits {
  explicit CachedUnits(int size, const std::vector<std::string>& names,
                       Kind kind = Kind::kAllreduce) : size(size), cache(16) {
    NegotiationTable warm(size);
    std::vector<Request> requests;
    for (const auto& name : names) requests.push_back(request(name, {2}, kind));
    for (int rank = 0; rank < size; ++rank) warm.receive(rank, messageOf(requests), cache, now);
    for (const Response& unit : warm.decide(cache).responses) cache.put(unit);
  }
  size_t slot(const std::string& name) const { return size_t(cache.slotOf(name)); }
  std::vector<uint8_t> bits(const std::vector<std::string>& names) const {
    std::vector<uint8_t> out;
    for (const auto& name : names) setBit(out, slot(name));
    return out;
  }
  // The job's merged report of a cycle in which rank r holds holds[r] (every unit is set
  // 0's, so a rank lacks every slot it does not hold, unless it is in `joined`).
  CycleReport report(const std::vector<std::vector<std::string>>& holds,
                     std::vector<RankPart> parts = {}, const std::vector<int>& joined = {}) const {
    CycleReport all;
    for (int rank = 0; rank < size; ++rank) {
      CycleReport one;
      one.held = bits(holds[rank]);
      if (std::find(joined.begin(), joined.end(), rank) == joined.end()) {
        for (size_t s = 0; s < cache.slotCount(); ++s) {
          if (!testBit(one.held, s)) setBit(one.missing, s);
        }
      }
      for (auto& part : parts) {
        if (part.rank == rank) one.parts.push_back(part);
      }
      mergeReport(all, std::move(one));
    }
    return all;
  }
  int size;
  ResponseCache cache;
  NegotiationTable::Clock::time_point now = NegotiationTable::Clock::now();
};

RankPart joinPart(int rank) {
  RankPart part{rank, {}};
  part.message.join = true;
  return part;
}

// A merged report keeps its parts by rank whatever order subtrees arrive in; its bytes round
// trip, and parts out of order or range are refused.
TEST(Negotiation, ReportsMergeUpTheTreeAndRoundTrip) {
  CycleReport a, b;
  setBit(a.held, 3);
  setBit(b.held, 17);
  setBit(b.missing, 3);
  a.parts.push_back({4, messageOf({request("x", {2})})});
  b.parts.push_back({1, {}});
  b.parts.push_back({7, {}});
  mergeReport(a, std::move(b));
  EXPECT_EQ(setBits(a.held), (std::vector<size_t>{3, 17}));
  EXPECT_EQ(setBits(a.missing), std::vector<size_t>{3});
  ASSERT_EQ(a.parts.size(), 3u);
  EXPECT_EQ(a.parts[0].rank, 1);
  EXPECT_EQ(a.parts[1].rank, 4);
  EXPECT_EQ(a.parts[2].rank, 7);
  auto bytes = encode(a);
  EXPECT_EQ(decodeCycleReport(bytes, 8), a);
  EXPECT_THROW(decodeCycleReport(bytes, 7), Error);  // rank 7 of 7
  std::swap(a.parts[0], a.parts[1]);
  EXPECT_THROW(decodeCycleReport(encode(a), 8), Error);
  bytes.pop_back();
  EXPECT_THROW(decodeCycleReport(bytes, 8), Error);
  // A bit set nowhere but in a short vector still merges.
  CycleReport c;
  setBit(c.missing, 40);
  mergeReport(a, std::move(c));
  EXPECT_TRUE(testBit(a.missing, 40) && testBit(a.missing, 3));
}

TEST(Negotiation, CachedUnitsTravelAsBits) {
  CachedUnits c(2, {"a"});
  const size_t slot = c.slot("a");
  EXPECT_EQ(c.cache.lookup(request("a", {3}), 1), -1);  // another shape is another unit
  NegotiationTable table(2);
  table.receive(c.report({{"a"}, {"a"}}), c.cache, c.now);
  auto answer = table.decide(c.cache);
  EXPECT_TRUE(answer.responses.empty());
  EXPECT_EQ(setBits(answer.cacheBits), std::vector<size_t>{slot});
  EXPECT_TRUE(answer.invalidated.empty());
  EXPECT_FALSE(answer.rollCall);
}

// Held units wait across cycles (their holders name them in every report) and the answer is
// the slot once every member holds it; which ranks lack one is known after a roll call.
TEST(Negotiation, HeldUnitsWaitAcrossCyclesAndARollCallNamesWhoLacksThem) {
  CachedUnits c(3, {"a", "b"});
  NegotiationTable table(3);
  table.receive(c.report({{"a", "b"}, {"b"}, {}}), c.cache, c.now);
  auto first = table.decide(c.cache);
  EXPECT_TRUE(first.cacheBits.empty() && first.responses.empty());
  EXPECT_TRUE(table.waiting().empty());  // not known by rank yet
  EXPECT_GE(table.longestHeldWait(c.now + std::chrono::seconds(2)), 2.0);
  table.callRoll();
  table.receive(c.report({{"a", "b"}, {"b"}, {}}), c.cache, c.now);
  auto second = table.decide(c.cache);
  EXPECT_TRUE(second.cacheBits.empty() && second.rollCall);
  // The roll call's answers: each holder's part names its slots.
  table.receive(c.report({{"a", "b"}, {"b"}, {}},
                         {{0, RequestMessage{false, false, c.bits({"a", "b"}), {}}},
                          {1, RequestMessage{false, false, c.bits({"b"}), {}}}}),
                c.cache, c.now);
  EXPECT_TRUE(table.decide(c.cache).cacheBits.empty());
  const auto waiting = table.waiting();
  ASSERT_EQ(waiting.size(), 2u);
  for (const auto& w : waiting) {
    EXPECT_EQ(w.key, w.names.front());
    const std::vector<int> missing = w.key == "a" ? std::vector<int>{1, 2} : std::vector<int>{2};
    EXPECT_EQ(w.missingRanks, missing);
  }
  table.receive(c.report({{"a", "b"}, {"a", "b"}, {"a", "b"}}), c.cache, c.now);
  auto third = table.decide(c.cache);
  EXPECT_TRUE(third.responses.empty());
  EXPECT_EQ(setBits(third.cacheBits), (std::vector<size_t>{c.slot("a"), c.slot("b")}));
  EXPECT_TRUE(table.waiting().empty());
  EXPECT_EQ(table.longestHeldWait(c.now), 0.0);
}

// A rank that sends a cached unit in full (its description differs) empties its slot on every
// rank; the holders then send it in full too and the full table names both ranks.
TEST(Negotiation, AFullSubmissionOfACachedUnitEmptiesItsSlot) {
  CachedUnits c(3, {"w"});
  NegotiationTable table(3);
  table.receive(c.report({{"w"}, {"w"}, {}}, {{2, messageOf({request("w", {5})})}}), c.cache,
                c.now);
  auto answer = table.decide(c.cache);
  EXPECT_TRUE(answer.cacheBits.empty());
  EXPECT_TRUE(answer.responses.empty());
  EXPECT_EQ(setBits(answer.invalidated), std::vector<size_t>{c.slot("w")});
  c.cache.erase(c.slot("w"));
  EXPECT_EQ(c.cache.lookup(request("w", {2}), 0), -1);
  table.receive(c.report({{}, {}, {}}, {{0, messageOf({request("w", {2})})},
                                        {1, messageOf({request("w", {2})})}}),
                c.cache, c.now);
  auto second = table.decide(c.cache);
  ASSERT_EQ(second.responses.size(), 1u);
  const std::string& error = second.responses[0].error;
  EXPECT_NE(error.find("rank 2 submitted allreduce f32 sum shape [5]"), std::string::npos)
      << error;
  EXPECT_NE(error.find("rank 0 submitted allreduce f32 sum shape [2]"), std::string::npos)
      << error;
}

// A joined rank holds nothing and lacks nothing: an all-reduce runs with its identity (the
// cached unit's slot again), a broadcast fails; the stall inspector fails a held unit by name.
TEST(Negotiation, HeldUnitsKeepTheFullTablesRules) {
  CachedUnits c(3, {"a", "b"});
  NegotiationTable table(3);
  table.receive(c.report({{"b"}, {"b"}, {}}, {joinPart(2)}, {2}), c.cache, c.now);
  auto joined = table.decide(c.cache);
  EXPECT_TRUE(joined.responses.empty());
  EXPECT_EQ(setBits(joined.cacheBits), std::vector<size_t>{c.slot("b")});

  NegotiationTable stalled(3);
  stalled.receive(c.report({{"a"}, {}, {}}), c.cache, c.now);
  EXPECT_TRUE(stalled.decide(c.cache).cacheBits.empty());
  stalled.fail("a", Status(StatusCode::kTimeout, "stalled", 2));
  auto failed = stalled.decide(c.cache);
  ASSERT_EQ(failed.responses.size(), 1u);
  EXPECT_EQ(failed.responses[0].names, std::vector<std::string>{"a"});
  EXPECT_EQ(failed.responses[0].error, "stalled");
  EXPECT_EQ(failed.responses[0].errorPeer, 2);
}

TEST(Negotiation, ACachedBroadcastWithAJoinedRankFails) {
  CachedUnits c(3, {"p"}, Kind::kBroadcast);
  NegotiationTable table(3);
  table.receive(c.report({{"p"}, {"p"}, {}}, {joinPart(2)}, {2}), c.cache, c.now);
  auto answer = table.decide(c.cache);
  ASSERT_EQ(answer.responses.size(), 1u);
  EXPECT_NE(answer.responses[0].error.find("rank 2 has joined"), std::string::npos)
      << answer.responses[0].error;
}

Response allreduceUnitForFusion(const std::string& name) {
  return Response{{name}, request(name, {4}).description, {}, "", {}};
}

// Ranks may hold a unit's tensors in different places: the response says where each rank's
// are, the unit is reduced on the host (and fused with host units only), and each rank's cache
// lookup matches its own placement.
TEST(Negotiation, MixedPlacementIsRecordedAndCachedPerRank) {
  NegotiationTable table(3);
  ResponseCache cache(8);
  const auto now = NegotiationTable::Clock::now();
  Request onDevice = request("g", {4});
  onDevice.description.onDevice = true;
  table.receive(0, messageOf({onDevice}), cache, now);
  table.receive(1, messageOf({request("g", {4})}), cache, now);
  table.receive(2, messageOf({onDevice}), cache, now);
  auto first = table.decide(cache);
  ASSERT_EQ(first.responses.size(), 1u);
  const Response& mixed = first.responses[0];
  EXPECT_EQ(mixed.error, "");
  EXPECT_EQ(mixed.placement, (std::vector<uint8_t>{Response::kDevice, Response::kHost,
                                                   Response::kDevice}));
  EXPECT_FALSE(mixed.reducedOnDevice());
  EXPECT_TRUE(mixed.onDeviceAt(0) && !mixed.onDeviceAt(1));
  const auto decoded = decodeResponseMessage(encode(first));
  EXPECT_EQ(decoded.responses.at(0), mixed);
  cache.put(mixed);
  EXPECT_GE(cache.lookup(onDevice, 0), 0);
  EXPECT_GE(cache.lookup(request("g", {4}), 1), 0);
  EXPECT_EQ(cache.lookup(request("g", {4}), 0), -1);  // rank 0 moved it: negotiate again
  // Every rank finds its own request in the one slot.
  CycleReport held;
  setBit(held.held, size_t(cache.lookup(onDevice, 0)));
  EXPECT_EQ(cache.lookup(request("g", {4}), 1), cache.lookup(onDevice, 2));
  table.receive(held, cache, now);
  auto second = table.decide(cache);
  EXPECT_TRUE(second.responses.empty());
  EXPECT_EQ(second.cacheBits.size(), 1u);
  // Uniform placement leaves it empty: reduced on the devices.
  for (int rank = 0; rank < 3; ++rank) {
    Request r = request("u", {4});
    r.description.onDevice = true;
    table.receive(rank, messageOf({r}), cache, now);
  }
  auto uniform = table.decide(cache);
  ASSERT_EQ(uniform.responses.size(), 1u);
  EXPECT_TRUE(uniform.responses[0].placement.empty());
  EXPECT_TRUE(uniform.responses[0].reducedOnDevice());
  // A mixed unit fuses with host units, not with device-reduced ones.
  Response host = allreduceUnitForFusion("h");
  EXPECT_EQ(planFusion({mixed, host, uniform.responses[0]}, 1 << 20),
            (std::vector<std::vector<size_t>>{{0, 1}, {2}}));
}

TEST(Negotiation, AlltoallSplitsBecomeTheMatrixAndJoinRefusesScatters) {
  NegotiationTable table(3);
  ResponseCache cache(8);
  const auto now = NegotiationTable::Clock::now();
  for (int rank = 0; rank < 3; ++rank) {
    Request a = request("t", {6 + rank, 2}, Kind::kAlltoall);
    a.description.splits = {rank, 1, 2};
    table.receive(rank, messageOf({a}), cache, now);
  }
  auto answer = table.decide(cache);
  ASSERT_EQ(answer.responses.size(), 1u);
  const Response& unit = answer.responses[0];
  EXPECT_TRUE(unit.error.empty()) << unit.error;
  EXPECT_EQ(unit.firstDims, (std::vector<int64_t>{0, 1, 2, 1, 1, 2, 2, 1, 2}));
  cache.put(unit);
  EXPECT_EQ(cache.find(unit), -1);  // splits change per call: never cached
  // The wire keeps the splits.
  RequestMessage m = messageOf({request("t", {3, 2}, Kind::kAlltoall)});
  m.requests[0].description.splits = {1, 0, 2};
  EXPECT_EQ(decodeRequestMessage(encode(m)).requests[0], m.requests[0]);
  // Trailing dimensions must agree; rows and splits may differ.
  Request wide = request("u", {3, 3}, Kind::kAlltoall);
  wide.description.splits = {1, 1, 1};
  Request narrow = request("u", {3, 2}, Kind::kAlltoall);
  narrow.description.splits = {1, 1, 1};
  table.receive(0, messageOf({wide}), cache, now);
  table.receive(1, messageOf({narrow}), cache, now);
  table.receive(2, messageOf({narrow}), cache, now);
  answer = table.decide(cache);
  ASSERT_EQ(answer.responses.size(), 1u);
  EXPECT_EQ(answer.responses[0].errorCode, StatusCode::kMismatch);
  // With a rank joined, a reducescatter and an alltoall fail on every rank; a barrier runs.
  RequestMessage join;
  join.join = true;
  table.receive(2, join, cache, now);
  for (int rank = 0; rank < 2; ++rank) {
    Request a = request("v", {3, 2}, Kind::kAlltoall);
    a.description.splits = {1, 1, 1};
    table.receive(rank, messageOf({request("s", {4}, Kind::kReducescatter), a,
                                   request("cerar.barrier", {}, Kind::kBarrier)}),
                  cache, now);
  }
  answer = table.decide(cache);
  ASSERT_EQ(answer.responses.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(answer.responses[i].error.find("rank 2 has joined"), std::string::npos)
        << answer.responses[i].error;
    EXPECT_EQ(answer.responses[i].errorPeer, 2);
  }
  EXPECT_TRUE(answer.responses[2].error.empty()) << answer.responses[2].error;
}

}  // namespace
}  // namespace cerar
