// The runtime's pure parts: configuration, negotiation messages and matching, response cache,
// fusion planner, stall inspector, scaling helpers (algorithm selection: selection_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "core/config/config.h"
#include "core/policy/fusion.h"
#include "core/control/negotiation.h"
#include "core/control/response_cache.h"
#include "core/execution/scaling.h"
#include "core/policy/selection.h"
#include "core/control/stall_inspector.h"
#include "common/error.h"

namespace cerar {
namespace {

using Env = std::map<std::string, std::string>;

RuntimeConfig fromMap(const Env& env) {
  return configFromEnvironment([&](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

std::string errorOf(const Env& env) {
  try {
    fromMap(env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RuntimeConfig, NoLauncherIsOneProcess) {
  RuntimeConfig c = fromMap({});
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.size, 1);
  EXPECT_EQ(c.fusionThresholdBytes, 64u << 20);
  EXPECT_EQ(c.algorithm, "auto");
}

TEST(RuntimeConfig, LauncherVariablesAndKnobs) {
  RuntimeConfig c = fromMap({{"CERAR_RANK", "2"}, {"CERAR_SIZE", "4"}, {"CERAR_LOCAL_RANK", "0"},
                             {"CERAR_LOCAL_SIZE", "2"}, {"CERAR_RENDEZVOUS_ADDR", "10.0.0.1"},
                             {"CERAR_RENDEZVOUS_PORT", "4242"}, {"CERAR_SECRET", "s"},
                             {"CERAR_FUSION_THRESHOLD", "0"}, {"CERAR_CYCLE_TIME", "2.5"},
                             {"CERAR_CACHE_CAPACITY", "16"}, {"CERAR_ALGORITHM", "cerar"},
                             {"CERAR_COMPONENTS", "8"}, {"CERAR_EPS", "0.001"},
                             {"CERAR_STALL_CHECK_TIME_SECONDS", "5"},
                             {"CERAR_LOG_LEVEL", "DEBUG"}, {"CERAR_SHARE_CORRECTION", "1"},
                             {"CERAR_DEBUG_ERROR", "true"}});
  EXPECT_TRUE(c.shareCorrection);
  EXPECT_TRUE(c.debugError);
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.size, 4);
  EXPECT_EQ(c.localSize, 2);
  EXPECT_EQ(c.rendezvousAddr, "10.0.0.1");
  EXPECT_EQ(c.rendezvousPort, 4242);
  EXPECT_FALSE(c.hostStore);  // cerarrun hosts the store
  EXPECT_EQ(c.fusionThresholdBytes, 0u);
  EXPECT_DOUBLE_EQ(c.cycleTimeMs, 2.5);
  EXPECT_EQ(c.cacheCapacity, 16u);
  EXPECT_EQ(c.components, 8);
  EXPECT_DOUBLE_EQ(c.eps, 0.001);
  EXPECT_DOUBLE_EQ(c.stallCheckSeconds, 5);
}

TEST(RuntimeConfig, TorchrunMpiAndSlurm) {
  RuntimeConfig t = fromMap({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"},
                             {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node0"},
                             {"MASTER_PORT", "29500"}});
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.size, 8);
  EXPECT_EQ(t.localRank, 3);
  EXPECT_EQ(t.rendezvousAddr, "node0");
  EXPECT_EQ(t.rendezvousPort, 29501);  // MASTER_PORT + 1
  EXPECT_TRUE(t.hostStore);

  RuntimeConfig m = fromMap({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.rendezvousAddr, "127.0.0.1");  // one node
  EXPECT_TRUE(m.hostStore);

  RuntimeConfig s = fromMap({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                             {"SLURM_NNODES", "2"}, {"SLURM_JOB_ID", "1234"},
                             {"CERAR_RENDEZVOUS_ADDR", "head"}});
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.localRank, 1);
  EXPECT_EQ(s.localSize, 4);
  EXPECT_EQ(s.rendezvousAddr, "head");
  EXPECT_EQ(s.rendezvousPort, 21234);
  EXPECT_NE(errorOf({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_NNODES", "2"}})
                .find("CERAR_RENDEZVOUS_ADDR"),
            std::string::npos);
}

TEST(RuntimeConfig, BadValuesNameTheVariable) {
  EXPECT_NE(errorOf({{"CERAR_FUSION_THRESHOLD", "lots"}}).find("CERAR_FUSION_THRESHOLD: 'lots'"),
            std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_CYCLE_TIME", "-1"}}).find("CERAR_CYCLE_TIME"), std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_ALGORITHM", "tree"}}).find("tree"), std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_LOG_LEVEL", "loud"}}).find("loud"), std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_RANK", "4"}, {"CERAR_SIZE", "4"}}).find("CERAR_RANK: '4'"),
            std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_RANK", "0"}, {"CERAR_SIZE", "4"}, {"CERAR_COMPONENTS", "6"}})
                .find("CERAR_COMPONENTS=6"),
            std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_RANK", "0"}}).find("CERAR_SIZE is not set"), std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_AUTOTUNE_STEPS_PER_SAMPLE", "0"}})
                .find("CERAR_AUTOTUNE_STEPS_PER_SAMPLE"),
            std::string::npos);
  EXPECT_NE(errorOf({{"CERAR_AUTOTUNE_WARMUP_SAMPLES", "-2"}})
                .find("CERAR_AUTOTUNE_WARMUP_SAMPLES"),
            std::string::npos);
}

TEST(RuntimeConfig, AutotuneKnobs) {
  const RuntimeConfig off = fromMap({});
  EXPECT_FALSE(off.autotune);
  EXPECT_EQ(off.autotuneWarmupSamples, 3);
  EXPECT_EQ(off.autotuneStepsPerSample, 10);
  const RuntimeConfig on = fromMap({{"CERAR_AUTOTUNE", "1"}, {"CERAR_AUTOTUNE_LOG", "/tmp/t.csv"},
                                    {"CERAR_AUTOTUNE_WARMUP_SAMPLES", "0"},
                                    {"CERAR_AUTOTUNE_STEPS_PER_SAMPLE", "4"}});
  EXPECT_TRUE(on.autotune);
  EXPECT_EQ(on.autotuneLog, "/tmp/t.csv");
  EXPECT_EQ(on.autotuneWarmupSamples, 0);
  EXPECT_EQ(on.autotuneStepsPerSample, 4);
  EXPECT_EQ(fromMap({{"CERAR_COMPONENTS_SCALE", "0.5"}}).componentsScale, 0.5);
  EXPECT_NE(errorOf({{"CERAR_COMPONENTS_SCALE", "0"}}).find("CERAR_COMPONENTS_SCALE"),
            std::string::npos);
}

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

// --- negotiation ---------------------------------------------------------------------------

Request request(const std::string& name, std::vector<int64_t> shape,
                Kind kind = Kind::kAllreduce, Op op = Op::kSum) {
  Request r;
  r.names = {name};
  r.description.kind = kind;
  r.description.op = op;
  r.description.shapes = {std::move(shape)};
  return r;
}

RequestMessage messageOf(std::vector<Request> requests) {
  RequestMessage m;
  m.requests = std::move(requests);
  return m;
}

TEST(RuntimeNegotiation, MessagesRoundTripAndRejectTruncation) {
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

TEST(RuntimeNegotiation, ReadyOnlyWhenEveryRankSubmittedInFirstSeenOrder) {
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

TEST(RuntimeNegotiation, MismatchNamesTensorRanksAndBothDescriptions) {
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

TEST(RuntimeNegotiation, AllgatherRowsMayDifferAndJoinedRanksCountAsReady) {
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

TEST(RuntimeNegotiation, CachedUnitsTravelAsBits) {
  NegotiationTable table(2);
  ResponseCache cache(8);
  const auto now = NegotiationTable::Clock::now();
  for (int rank = 0; rank < 2; ++rank) table.receive(rank, messageOf({request("a", {2})}), cache, now);
  auto first = table.decide(cache);
  ASSERT_EQ(first.responses.size(), 1u);
  cache.put(first.responses[0]);
  const int64_t slot = cache.lookup(request("a", {2}), 1);
  ASSERT_GE(slot, 0);
  EXPECT_EQ(cache.lookup(request("a", {3}), 1), -1);  // another shape is another unit
  RequestMessage bits;
  setBit(bits.cacheBits, size_t(slot));
  table.receive(0, bits, cache, now);
  table.receive(1, bits, cache, now);
  auto second = table.decide(cache);
  EXPECT_TRUE(second.responses.empty());
  EXPECT_EQ(setBits(second.cacheBits), std::vector<size_t>{size_t(slot)});
}

// A cache of `names`' allreduce units of shape {2}, as every rank holds it after they ran.
struct CachedUnits {
  explicit CachedUnits(int size, const std::vector<std::string>& names,
                       Kind kind = Kind::kAllreduce) : cache(16) {
    NegotiationTable warm(size);
    std::vector<Request> requests;
    for (const auto& name : names) requests.push_back(request(name, {2}, kind));
    for (int rank = 0; rank < size; ++rank) warm.receive(rank, messageOf(requests), cache, now);
    for (const Response& unit : warm.decide(cache).responses) cache.put(unit);
  }
  RequestMessage bits(const std::vector<std::string>& names) const {
    RequestMessage message;
    for (const auto& name : names) {
      const int64_t slot = cache.lookup(request(name, {2}), 0);
      EXPECT_GE(slot, 0) << name;
      setBit(message.cacheBits, size_t(slot));
    }
    return message;
  }
  size_t slot(const std::string& name) const { return size_t(cache.lookup(request(name, {2}), 0)); }
  ResponseCache cache;
  NegotiationTable::Clock::time_point now = NegotiationTable::Clock::now();
};

// Units every rank names by slot are counted by slot; they wait across cycles and the answer
// is the slot once every rank has one.
TEST(RuntimeNegotiation, CachedUnitsWaitBySlotAcrossCycles) {
  CachedUnits c(3, {"a", "b"});
  NegotiationTable table(3);
  table.receive(0, c.bits({"a", "b"}), c.cache, c.now);
  table.receive(1, c.bits({"b"}), c.cache, c.now);
  auto first = table.decide(c.cache);
  EXPECT_TRUE(first.cacheBits.empty() && first.responses.empty());
  const auto waiting = table.waiting();
  ASSERT_EQ(waiting.size(), 2u);
  for (const auto& w : waiting) {
    EXPECT_EQ(w.key, w.names.front());
    const std::vector<int> missing = w.key == "a" ? std::vector<int>{1, 2} : std::vector<int>{2};
    EXPECT_EQ(w.missingRanks, missing);
  }
  table.receive(1, c.bits({"a"}), c.cache, c.now);
  table.receive(2, c.bits({"a", "b"}), c.cache, c.now);
  auto second = table.decide(c.cache);
  EXPECT_TRUE(second.responses.empty());
  EXPECT_EQ(setBits(second.cacheBits), (std::vector<size_t>{c.slot("a"), c.slot("b")}));
  EXPECT_TRUE(table.waiting().empty());
  EXPECT_TRUE(table.decide(c.cache).cacheBits.empty());
}

// A rank that sends a cached unit in full (its description differs) meets the others' slot
// submissions in the full table: the mismatch names both ranks, as without the cache.
TEST(RuntimeNegotiation, AFullSubmissionJoinsTheSlotSubmissionsOfItsUnit) {
  CachedUnits c(3, {"w"});
  NegotiationTable table(3);
  table.receive(0, c.bits({"w"}), c.cache, c.now);
  table.receive(1, c.bits({"w"}), c.cache, c.now);
  table.receive(2, messageOf({request("w", {5})}), c.cache, c.now);
  auto answer = table.decide(c.cache);
  EXPECT_TRUE(answer.cacheBits.empty());
  ASSERT_EQ(answer.responses.size(), 1u);
  const std::string& error = answer.responses[0].error;
  EXPECT_NE(error.find("rank 0 submitted allreduce f32 sum shape [2]"), std::string::npos)
      << error;
  EXPECT_NE(error.find("rank 2 submitted allreduce f32 sum shape [5]"), std::string::npos)
      << error;
  // The same after the full submission came first, and a full answer that matches the cache
  // is still its slot.
  table.receive(0, messageOf({request("w", {2})}), c.cache, c.now);
  table.receive(1, c.bits({"w"}), c.cache, c.now);
  table.receive(2, c.bits({"w"}), c.cache, c.now);
  auto again = table.decide(c.cache);
  EXPECT_TRUE(again.responses.empty());
  EXPECT_EQ(setBits(again.cacheBits), std::vector<size_t>{c.slot("w")});
}

// A second submission by slot, a joined rank, a stall and a cycle with a full answer move
// slot submissions to the full table, which decides as it always did.
TEST(RuntimeNegotiation, SlotSubmissionsKeepTheFullTablesRules) {
  CachedUnits c(3, {"a", "b"});
  NegotiationTable table(3);
  table.receive(0, c.bits({"a"}), c.cache, c.now);
  table.receive(0, c.bits({"a"}), c.cache, c.now);
  table.receive(1, c.bits({"a"}), c.cache, c.now);
  table.receive(2, c.bits({"a"}), c.cache, c.now);
  auto twice = table.decide(c.cache);
  ASSERT_EQ(twice.responses.size(), 1u);
  EXPECT_NE(twice.responses[0].error.find("rank 0 submitted tensor 'a' twice"),
            std::string::npos) << twice.responses[0].error;

  // An all-reduce runs with the joined rank's identity: the cached unit's slot again.
  RequestMessage join;
  join.join = true;
  table.receive(0, c.bits({"b"}), c.cache, c.now);
  table.receive(1, c.bits({"b"}), c.cache, c.now);
  table.receive(2, join, c.cache, c.now);
  auto joined = table.decide(c.cache);
  EXPECT_TRUE(joined.responses.empty());
  EXPECT_EQ(setBits(joined.cacheBits), std::vector<size_t>{c.slot("b")});

  // The stall inspector fails a unit waiting by slot.
  NegotiationTable stalled(3);
  stalled.receive(0, c.bits({"a"}), c.cache, c.now);
  stalled.fail("a", Status(StatusCode::kTimeout, "stalled", 2));
  auto failed = stalled.decide(c.cache);
  ASSERT_EQ(failed.responses.size(), 1u);
  EXPECT_EQ(failed.responses[0].error, "stalled");

  // A cycle that answers something in full (the caches change after it) leaves the units
  // waiting by slot in the full table, where their next submissions join them.
  NegotiationTable mixed(2);
  CachedUnits two(2, {"a"});
  mixed.receive(0, two.bits({"a"}), two.cache, two.now);
  mixed.receive(0, messageOf({request("new", {2})}), two.cache, two.now);
  mixed.receive(1, messageOf({request("new", {2})}), two.cache, two.now);
  auto fresh = mixed.decide(two.cache);
  ASSERT_EQ(fresh.responses.size(), 1u);
  two.cache.put(fresh.responses[0]);
  ASSERT_EQ(mixed.waiting().size(), 1u);
  mixed.receive(1, two.bits({"a"}), two.cache, two.now);
  auto done = mixed.decide(two.cache);
  EXPECT_TRUE(done.responses.empty());
  EXPECT_EQ(setBits(done.cacheBits), std::vector<size_t>{two.slot("a")});
}

// A broadcast that a rank joined instead of submitting fails, by slot as in full.
TEST(RuntimeNegotiation, ACachedBroadcastWithAJoinedRankFails) {
  CachedUnits c(3, {"p"}, Kind::kBroadcast);
  NegotiationTable table(3);
  RequestMessage bits;
  setBit(bits.cacheBits, size_t(c.cache.lookup(request("p", {2}, Kind::kBroadcast), 0)));
  RequestMessage join;
  join.join = true;
  table.receive(0, bits, c.cache, c.now);
  table.receive(1, bits, c.cache, c.now);
  table.receive(2, join, c.cache, c.now);
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
TEST(RuntimeNegotiation, MixedPlacementIsRecordedAndCachedPerRank) {
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
  // Cached bits come back as each rank's own request.
  RequestMessage bits;
  setBit(bits.cacheBits, size_t(cache.lookup(onDevice, 0)));
  for (int rank = 0; rank < 3; ++rank) table.receive(rank, bits, cache, now);
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

TEST(RuntimeCache, LeastRecentlyUsedIsEvictedIdenticallyEverywhere) {
  ResponseCache a(2), b(2);
  auto unit = [](const std::string& n) { return Response{{n}, request(n, {1}).description, {}, "", {}}; };
  for (auto* cache : {&a, &b}) {
    cache->put(unit("x"));
    cache->put(unit("y"));
    cache->put(unit("x"));  // touch x: y is now the least recently used
    cache->put(unit("z"));
  }
  EXPECT_EQ(a.find(unit("y")), -1);
  EXPECT_EQ(a.find(unit("x")), b.find(unit("x")));
  EXPECT_EQ(a.find(unit("z")), b.find(unit("z")));
  EXPECT_EQ(a.size(), 2u);
  ResponseCache off(0);
  off.put(unit("x"));
  EXPECT_EQ(off.find(unit("x")), -1);
}

// --- fusion ---------------------------------------------------------------------------------

Response allreduceUnit(const std::string& name, int64_t elements, DType dtype = DType::kFloat32) {
  Response r{{name}, request(name, {elements}).description, {}, "", {}};
  r.description.dtype = dtype;
  return r;
}

TEST(RuntimeFusion, PacksCompatibleUnitsUpToTheThreshold) {
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

TEST(RuntimeFusion, ReducescattersFuseAmongThemselves) {
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

TEST(RuntimeNegotiation, AlltoallSplitsBecomeTheMatrixAndJoinRefusesScatters) {
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

TEST(RuntimeStall, WarnsByMissingRankThenFails) {
  StallInspector inspector(1.0, 3.0);
  const auto t0 = StallInspector::Clock::now();
  std::vector<NegotiationTable::Waiting> waiting = {{"a", {"a"}, {2}, t0}, {"b", {"b"}, {2, 3}, t0}};
  EXPECT_TRUE(inspector.inspect(waiting, t0 + std::chrono::milliseconds(500)).warning.empty());
  auto report = inspector.inspect(waiting, t0 + std::chrono::milliseconds(1500));
  EXPECT_NE(report.warning.find("rank 2 is missing 'a', 'b'"), std::string::npos)
      << report.warning;
  EXPECT_NE(report.warning.find("rank 3 is missing 'b'"), std::string::npos) << report.warning;
  EXPECT_TRUE(report.failures.empty());
  // Not again within the check time.
  EXPECT_TRUE(inspector.inspect(waiting, t0 + std::chrono::milliseconds(2000)).warning.empty());
  report = inspector.inspect(waiting, t0 + std::chrono::milliseconds(3500));
  ASSERT_EQ(report.failures.size(), 2u);
  const Status& failure = report.failures[1].second;
  EXPECT_NE(failure.message.find("ranks 2, 3 have not submitted"), std::string::npos)
      << failure.message;
  EXPECT_EQ(failure.code, StatusCode::kTimeout);
  EXPECT_EQ(failure.peer, 2);  // the first rank missing
}

TEST(RuntimeScaling, ScaledCopiesAndIdentities) {
  std::vector<float> in = {1, 2, 3}, out(3);
  scaledCopy(DType::kFloat32, in.data(), out.data(), 3, 0.5);
  EXPECT_EQ(out, (std::vector<float>{0.5f, 1, 1.5f}));
  std::vector<double> d(2);
  fillIdentity(DType::kFloat64, ReduceOp::kMin, d.data(), 2);
  EXPECT_EQ(d[0], std::numeric_limits<double>::infinity());
  std::vector<int32_t> i(2, 7);
  fillIdentity(DType::kInt32, ReduceOp::kMax, i.data(), 2);
  EXPECT_EQ(i[1], std::numeric_limits<int32_t>::lowest());
  EXPECT_THROW(scaledCopy(DType::kInt32, i.data(), i.data(), 2, 2.0), Error);
}

}  // namespace
}  // namespace cerar
