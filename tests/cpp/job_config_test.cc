// Agree once, decide once: rank 0's job-wide settings are the job's (core/config/job_config.h), the
// coordinator rank decides every fusion group's layout and algorithm and the response carries
// it, and a process can start and stop the runtime again and again.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/config/config.h"
#include "core/policy/fusion.h"
#include "core/config/job_config.h"
#include "core/control/negotiation.h"
#include "rendezvous/tcp_store.h"
#include "ops/transport/inproc.h"
#include "child_processes.h"
#include "runtime_scenarios.h"
#include "tools/local_job.h"

namespace cerar {
namespace {

using namespace scenarios;

// --- the settings, pure ------------------------------------------------------------------

TEST(JobSettings, RankZerosValuesWinAndEachDifferenceIsNamed) {
  RuntimeConfig zero, mine;
  zero.algorithm = "cerar";
  zero.eps = 1e-3;
  zero.cacheCapacity = 7;
  mine.algorithm = "ring";
  mine.eps = 1e-3;
  mine.fusionThresholdBytes = 4096;
  mine.rank = 3, mine.size = 4, mine.logLevel = "debug", mine.timeline = "/tmp/t.json";
  std::vector<std::string> differences;
  const RuntimeConfig job = adoptJobSettings(mine, encodeJobSettings(zero), differences);
  EXPECT_EQ(job.algorithm, "cerar");
  EXPECT_EQ(job.cacheCapacity, 7u);
  EXPECT_EQ(job.fusionThresholdBytes, zero.fusionThresholdBytes);
  // Per-rank settings stay this rank's.
  EXPECT_EQ(job.rank, 3);
  EXPECT_EQ(job.logLevel, "debug");
  EXPECT_EQ(job.timeline, "/tmp/t.json");
  ASSERT_EQ(differences.size(), 3u);
  EXPECT_EQ(differences[0], "CERAR_ALGORITHM: this rank had 'ring', the job uses rank 0's 'cerar'");
  EXPECT_NE(differences[1].find("CERAR_FUSION_THRESHOLD: this rank had 4096"), std::string::npos);
  EXPECT_NE(differences[2].find("CERAR_CACHE_CAPACITY"), std::string::npos);
  // Equal settings: nothing to say.
  differences.clear();
  adoptJobSettings(zero, encodeJobSettings(zero), differences);
  EXPECT_TRUE(differences.empty());
}

TEST(JobSettings, MalformedOrForeignEncodingIsAnError) {
  std::vector<uint8_t> bytes = encodeJobSettings(RuntimeConfig{});
  std::vector<std::string> differences;
  auto truncated = bytes;
  truncated.resize(bytes.size() / 2);
  EXPECT_THROW(adoptJobSettings(RuntimeConfig{}, truncated, differences), Error);
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_THROW(adoptJobSettings(RuntimeConfig{}, longer, differences), Error);
  auto foreign = bytes;
  foreign[0] = 99;
  EXPECT_THROW(adoptJobSettings(RuntimeConfig{}, foreign, differences), Error);
}

// --- decisions, pure -----------------------------------------------------------------------

Response allreduceUnit(const std::string& name, size_t elements, Op op = Op::kSum) {
  Response r;
  r.names = {name};
  r.description.op = op;
  r.description.shapes = {{int64_t(elements)}};
  return r;
}

TEST(Decisions, GroupsArePlanFusionsWithTheSelectionOfTheirTotal) {
  std::vector<Response> units = {allreduceUnit("a", 1 << 18), allreduceUnit("b", 1 << 18),
                                 allreduceUnit("m", 100, Op::kMax), allreduceUnit("c", 10)};
  units.push_back(allreduceUnit("e", 5));
  units.back().error = "mismatch";
  SelectionPolicy policy;
  policy.algorithm = "cerar";
  policy.components = 8;
  policy.shareCorrection = true;
  const auto groups = decideGroups(units, 4, 64 << 20, LinkModel{}, policy);
  const auto plan = planFusion(units, 64 << 20);
  ASSERT_EQ(groups.size(), plan.size());
  for (size_t g = 0; g < plan.size(); ++g) {
    EXPECT_EQ(groups[g].members, std::vector<uint32_t>(plan[g].begin(), plan[g].end()));
  }
  // a, b and c fused: CERAR as forced; max: the ring; the error unit: no reduction.
  EXPECT_EQ(groups[0].members, (std::vector<uint32_t>{0, 1, 3}));
  EXPECT_EQ(groups[0].algorithm, Algorithm::kCerar);
  EXPECT_EQ(groups[0].components, 8);
  EXPECT_EQ(groups[0].eps, defaultEps(DType::kFloat32));
  EXPECT_TRUE(groups[0].shareCorrection);
  EXPECT_EQ(groups[1].algorithm, Algorithm::kRing);
  EXPECT_FALSE(groups[1].shareCorrection);
  EXPECT_EQ(groups[2].algorithm, Algorithm::kRing);

  ResponseMessage message;
  message.responses = units;
  message.groups = groups;
  const ResponseMessage decoded = decodeResponseMessage(encode(message));
  EXPECT_EQ(decoded.groups, groups);
  auto bytes = encode(message);
  // The answer ends with the last group, then the invalidated slots (u32 length 0) and the
  // roll call (u8).
  const size_t groupEnd = bytes.size() - 5;
  bytes[groupEnd - 15] = 7;  // the last group's algorithm byte
  EXPECT_THROW(decodeResponseMessage(bytes), Error);
  bytes = encode(message);
  bytes[groupEnd - 1] = 4;  // the last group's wire byte (0..3: none, fp16, bf16, int8)
  EXPECT_THROW(decodeResponseMessage(bytes), Error);
}

// A 16-bit wire: asked for by the unit or the job, taken by float32 sums and averages on the
// host only, always on the exact ring, sent with the response; a unit asking apart is fused
// apart.
TEST(Decisions, SixteenBitWireOnlyForFloat32HostSums) {
  std::vector<Response> units = {allreduceUnit("job", 1 << 18), allreduceUnit("asks", 1 << 18),
                                 allreduceUnit("max", 100, Op::kMax),
                                 allreduceUnit("avg", 100, Op::kAverage),
                                 allreduceUnit("f64", 100), allreduceUnit("gpu", 100)};
  units[1].description.wire = Wire::kFloat16;
  units[4].description.dtype = DType::kFloat64;
  units[5].description.onDevice = true;
  SelectionPolicy policy;
  policy.algorithm = "cerar";
  policy.components = 8;
  policy.wire = Wire::kBFloat16;
  const auto groups = decideGroups(units, 4, 1 << 10, LinkModel{}, policy);
  ASSERT_EQ(groups.size(), 6u);  // fusion threshold below every unit: one group each
  const Wire expected[] = {Wire::kBFloat16, Wire::kFloat16, Wire::kNone,
                           Wire::kBFloat16, Wire::kNone,    Wire::kNone};
  for (size_t g = 0; g < groups.size(); ++g) {
    EXPECT_EQ(groups[g].wire, expected[g]) << g;
    if (groups[g].wire != Wire::kNone) {
      EXPECT_EQ(groups[g].algorithm, Algorithm::kRing) << g;
      EXPECT_EQ(groups[g].components, 4) << g;
    }
  }
  EXPECT_EQ(groups[4].algorithm, Algorithm::kCerar);  // float64 still follows the policy
  EXPECT_EQ(planFusion({units[0], units[1]}, 64 << 20).size(), 2u);
  ResponseMessage message;
  message.responses = units;
  message.groups = groups;
  EXPECT_EQ(decodeResponseMessage(encode(message)).groups, groups);
  EXPECT_EQ(decodeResponseMessage(encode(message)).responses, units);
}

// --- one rank with different settings, 4 processes --------------------------------------------

std::string hexOf(const void* data, size_t bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) out += digits[p[i] >> 4], out += digits[p[i] & 15];
  return out;
}

// FNV-1a of the bytes: results are compared, not shown.
std::string digest(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return hexOf(&h, sizeof h);
}

// A workload whose results do not depend on timing, so two runs can be compared bit for bit:
// a grouped CERAR-sized sum (one unit), sums waited one at a time, and max of tensors enqueued
// together (the fusion layout varies with timing, max's results do not; ranks that fused
// differently would post different sizes).
std::string workload(int rank, Runtime& rt) {
  std::mt19937 gen(rank + 11);
  std::normal_distribution<float> normal(0, 1);
  const auto fresh = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = 1.0f + normal(gen);
    return v;
  };
  std::vector<std::vector<float>> grouped;
  std::vector<Tensor> views;
  std::vector<std::string> names;
  for (int i = 0; i < 3; ++i) {
    grouped.push_back(fresh(20000 + 777 * i));
    names.push_back("group." + std::to_string(i));
  }
  for (auto& g : grouped) views.push_back(f32(g));
  rt.groupedAllreduce(names, views, views, Op::kSum).wait();
  std::vector<float> single = fresh(30001);
  for (int step = 0; step < 3; ++step) rt.allreduce("single", f32(single), f32(single), Op::kSum).wait();
  std::vector<std::vector<float>> maxima;
  std::vector<Handle> handles;
  for (int i = 0; i < 6; ++i) maxima.push_back(fresh(9000 + i));
  for (int i = 0; i < 6; ++i) {
    handles.push_back(rt.allreduce("max." + std::to_string(i), f32(maxima[i]), f32(maxima[i]), Op::kMax));
  }
  for (auto& h : handles) h.wait();
  std::string out;
  for (auto& g : grouped) out += digest(g);
  out += digest(single);
  for (auto& m : maxima) out += digest(m);
  return out;
}

RuntimeConfig baseConfig() {
  RuntimeConfig c = testConfig();
  c.algorithm = "cerar";
  c.components = 16;
  c.fusionThresholdBytes = 1 << 20;
  return c;
}

// Each job-wide setting with a value other than baseConfig()'s.
std::vector<std::pair<std::string, std::function<void(RuntimeConfig&)>>> variations() {
  return {
      {"CERAR_ALGORITHM", [](RuntimeConfig& c) { c.algorithm = "ring"; }},
      {"CERAR_COMPONENTS", [](RuntimeConfig& c) { c.components = 8; }},
      {"CERAR_EPS", [](RuntimeConfig& c) { c.eps = 1e-3; }},
      {"CERAR_SHARE_CORRECTION", [](RuntimeConfig& c) { c.shareCorrection = true; }},
      {"CERAR_COMPRESSION", [](RuntimeConfig& c) { c.compression = "fp16"; }},
      {"CERAR_MAX_ERROR", [](RuntimeConfig& c) { c.maxError = 1e-3; }},
      {"CERAR_DEBUG_ERROR", [](RuntimeConfig& c) { c.debugError = true; }},
      {"CERAR_FUSION_THRESHOLD", [](RuntimeConfig& c) { c.fusionThresholdBytes = 50000; }},
      {"CERAR_CYCLE_TIME", [](RuntimeConfig& c) { c.cycleTimeMs = 4; }},
      {"CERAR_CACHE_CAPACITY", [](RuntimeConfig& c) { c.cacheCapacity = 0; }},
      {"CERAR_STALL_CHECK_TIME_SECONDS", [](RuntimeConfig& c) { c.stallCheckSeconds = 0.001; }},
      {"CERAR_STALL_SHUTDOWN_TIME_SECONDS", [](RuntimeConfig& c) { c.stallShutdownSeconds = 0.001; }},
      {"CERAR_TIMEOUT_SECONDS", [](RuntimeConfig& c) { c.timeoutSeconds = 0.001; }},
      {"CERAR_MEASURE_LINK", [](RuntimeConfig& c) { c.measureLink = true; }},
      {"CERAR_DEVICE_TRANSPORT", [](RuntimeConfig& c) { c.deviceTransport = "gloo"; }},
      {"CERAR_COMPONENTS_SCALE", [](RuntimeConfig& c) { c.componentsScale = 2; }},
      {"CERAR_AUTOTUNE", [](RuntimeConfig& c) { c.autotune = true; }},
      {"CERAR_AUTOTUNE_LOG", [](RuntimeConfig& c) { c.autotuneLog = "/nonexistent/tune.csv"; }},
      {"CERAR_AUTOTUNE_WARMUP_SAMPLES", [](RuntimeConfig& c) { c.autotuneWarmupSamples = 0; }},
      {"CERAR_AUTOTUNE_STEPS_PER_SAMPLE", [](RuntimeConfig& c) { c.autotuneStepsPerSample = 1; }},
      {"CERAR_DYNAMIC_PROCESS_SETS", [](RuntimeConfig& c) { c.dynamicProcessSets = true; }},
      {"CERAR_ERROR_BOUND", [](RuntimeConfig& c) { c.errorBound = "strict"; }},
      {"CERAR_ERROR_FEEDBACK", [](RuntimeConfig& c) { c.errorFeedback = true; }},
      {"CERAR_SHARED_MEMORY", [](RuntimeConfig& c) { c.sharedMemory = false; }},
      {"CERAR_LAZY_LINKS", [](RuntimeConfig& c) { c.lazyLinks = false; }},
      {"CERAR_HIERARCHICAL_ALLREDUCE", [](RuntimeConfig& c) { c.hierarchicalAllreduce = "1"; }},
      {"CERAR_CONTROL_FANOUT", [](RuntimeConfig& c) { c.controlFanout = 1; }},
  };
}

TEST(JobSettingsMultiprocess, OneRankDifferingChangesNoBitAndWarns) {
  const auto all = variations();
  ASSERT_EQ(all.size(), jobSettingNames().size()) << "a job-wide setting lacks a variation";
  LocalJobOptions options;
  options.size = 4;
  options.transport = LocalTransport::kGloo;
  options.timeout = 20s;
  options.deadline = 60s;
  // variation -1: every rank has baseConfig(); else rank 1 has variation v.
  const auto runJob = [&](int v) {
    return runLocalJob(options, [&](int rank, std::shared_ptr<Transport> transport) {
      RuntimeConfig config = baseConfig();
      if (v >= 0 && rank == 1) all[v].second(config);
      LogCapture log;
      config.logSink = log.sink();
      auto rt = Runtime::startWith(config, transport);
      std::string out = workload(rank, *rt);
      rt->shutdown();
      const std::string warning = log.find("job-wide setting");
      return out + "|" + (warning.empty() ? "" : warning.substr(warning.find("CERAR_")));
    });
  };
  const auto baseline = runJob(-1);
  for (const auto& result : baseline) EXPECT_EQ(result.substr(result.find('|')), "|");
  for (size_t v = 0; v < all.size(); ++v) {
    SCOPED_TRACE(all[v].first);
    const auto results = runJob(int(v));
    for (int rank = 0; rank < 4; ++rank) {
      const std::string& r = results[rank];
      EXPECT_EQ(r.substr(0, r.find('|')), baseline[rank].substr(0, baseline[rank].find('|')))
          << "rank " << rank << " results differ";
      const std::string warning = r.substr(r.find('|') + 1);
      if (rank == 1) {
        EXPECT_EQ(warning.rfind(all[v].first + ": this rank had ", 0), 0u) << warning;
      } else {
        EXPECT_EQ(warning, "") << "rank " << rank;
      }
    }
  }
}

// --- decisions from the coordinator rank's link figures only --------------------------------

TEST(Decisions, RanksWithDifferentLinkFiguresRunTheCoordinatorsChoice) {
  constexpr int N = 4;
  constexpr size_t kElements = 1 << 22;  // 16 MiB: auto considers CERAR
  // Latency from ~0 to 3 ms: the modelled c falls from 12 to the ring's.
  const auto figures = [](int rank) {
    return std::array<double, 3>{1e-7 + 1e-3 * rank, 4e-9, 0.1e-9};
  };
  std::set<int> perRankChoice;
  for (int rank = 0; rank < N; ++rank) {
    const auto f = figures(rank);
    LinkModel link{f[0], f[1], f[2]};
    perRankChoice.insert(selectAlgorithm(N, DType::kFloat32, ReduceOp::kSum, kElements, link,
                                         SelectionPolicy{}).components);
  }
  ASSERT_GT(perRankChoice.size(), 1u) << "the figures must lead ranks to different choices";

  // Run 0: every rank has rank 0's figures; run 1: each its own.
  std::vector<std::vector<std::string>> runs;
  for (bool own : {false, true}) {
    InprocHub hub(N, 20s);
    std::vector<std::string> results(N);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < N; ++rank) {
      threads.emplace_back([&, rank] {
        RuntimeConfig config = testConfig();
        config.linkFigures = figures(own ? rank : 0);
        try {
          auto rt = Runtime::startWith(config, hub.connect(rank));
          std::mt19937 gen(rank);
          std::normal_distribution<float> normal(0, 1);
          std::vector<float> g(kElements);
          for (auto& x : g) x = 1.0f + normal(gen);
          rt->allreduce("g", f32(g), f32(g), Op::kSum).wait();
          const RuntimeStats s = rt->stats();
          results[rank] = detail::concat("c=", s.lastComponents, " cerar=", s.cerarBuffers,
                                         " ", digest(g));
        } catch (const std::exception& e) {
          results[rank] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    runs.push_back(results);
  }
  const auto zero = figures(0);
  const int expected = selectAlgorithm(N, DType::kFloat32, ReduceOp::kSum, kElements,
                                       LinkModel{zero[0], zero[1], zero[2]}, SelectionPolicy{})
                           .components;
  for (int rank = 0; rank < N; ++rank) {
    EXPECT_EQ(runs[1][rank], runs[0][rank]) << "rank " << rank;
    EXPECT_EQ(runs[1][rank].rfind(detail::concat("c=", expected, " "), 0), 0u) << runs[1][rank];
  }
}

// --- init, shutdown, init: 4 processes through Runtime::start --------------------------------

using Environment = std::vector<std::pair<std::string, std::string>>;

// Forks 4 ranks that each start, use and shut down the runtime three times from the
// environment; rank 2 also differs in CERAR_EPS (the store carries rank 0's settings).
// Returns the exit codes.
std::vector<int> restartThrice(const std::function<Environment(int)>& environment,
                               const std::function<void()>& afterFork = {}) {
  constexpr int N = 4;
  const std::vector<pid_t> pids = testing::forkRanks(N, [&](int rank) {
    for (const auto& [name, value] : environment(rank)) setenv(name.c_str(), value.c_str(), 1);
    setenv("CERAR_TIMEOUT_SECONDS", "20", 1);
    setenv("CERAR_ALGORITHM", "cerar", 1);
    setenv("CERAR_MEASURE_LINK", "0", 1);
    if (rank == 2) setenv("CERAR_EPS", "0.01", 1);
    for (int round = 0; round < 3; ++round) {
      RuntimeConfig config = RuntimeConfig::fromEnvironment();
      LogCapture log;
      config.logSink = log.sink();
      auto rt = Runtime::start(config);
      std::vector<float> ones(40000, 1.0f);
      rt->allreduce("x", f32(ones), f32(ones), Op::kSum).wait();
      check(ones[0] > 3.9f && ones[0] < 4.1f, "round ", round, ": sum ", ones[0]);
      check((rank == 2) == !log.find("CERAR_EPS: this rank had 0.01").empty(),
            "round ", round, ": the warning about CERAR_EPS");
      rt->shutdown();
    }
    return 0;
  });
  if (afterFork) afterFork();
  return testing::exitCodes(pids);
}

TEST(RuntimeRestart, ThreeTimesUnderTheLauncherWhoseStoreOutlivesEachStart) {
  TcpStoreServer server("127.0.0.1", 0, "s3cret");
  const std::string port = std::to_string(server.port());
  auto codes = restartThrice([&](int rank) {
    return Environment{{"CERAR_RANK", std::to_string(rank)}, {"CERAR_SIZE", "4"},
                       {"CERAR_RENDEZVOUS_ADDR", "127.0.0.1"}, {"CERAR_RENDEZVOUS_PORT", port},
                       {"CERAR_SECRET", "s3cret"}};
  }, [&] { server.start(); });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0, 0}));
}

TEST(RuntimeRestart, ThreeTimesUnderTorchrunVariablesWithRankZerosStore) {
  const int port = testing::freePort();
  auto codes = restartThrice([&](int rank) {
    return Environment{{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "4"},
                       {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port - 1)},
                       {"CERAR_SECRET", "t0rch"}};
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace cerar
