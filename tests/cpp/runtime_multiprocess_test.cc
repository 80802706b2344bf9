// The runtime with every rank a forked process on loopback: over Gloo transports made by the
// local-job launcher, and through Runtime::start from a launcher's environment (the store
// hosted by the launcher, or by rank 0 as under torchrun).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ops/transport/gloo_tcp.h"
#include "rendezvous/tcp_store.h"
#include "child_processes.h"
#include "runtime_scenarios.h"
#include "tools/local_job.h"

namespace cerar {
namespace {

using namespace scenarios;

std::vector<std::string> runProcesses(int N, const Scenario& scenario) {
  LocalJobOptions options;
  options.size = N;
  options.transport = LocalTransport::kGloo;
  options.timeout = 20s;
  options.deadline = 60s;
  options.failureGrace = 2s;
  return runLocalJob(options, [&](int rank, std::shared_ptr<Transport> transport) {
    Starter start = [transport](RuntimeConfig config) {
      return Runtime::startWith(config, transport);
    };
    return scenario(rank, start);
  });
}

TEST(RuntimeMultiprocess, OutOfOrderAndMultiThreaded) {
  runProcesses(4, outOfOrderMultiThreaded);
}

TEST(RuntimeMultiprocess, ThousandSmallTensorsFusedEqualUnfused) {
  auto results = runProcesses(4, fusedEqualsUnfused);
  for (const auto& r : results) EXPECT_EQ(r, results[0]);  // bit-identical on every rank
}

TEST(RuntimeMultiprocess, CacheHitsInSteadyLoop) { runProcesses(4, cacheHits); }

TEST(RuntimeMultiprocess, JoinWithUnevenSteps) {
  auto results = runProcesses(4, joinUneven);
  for (const auto& r : results) EXPECT_EQ(r, "last joined 3");
}

TEST(RuntimeMultiprocess, TimelineParsesAndHoldsThePhases) {
  const std::string pattern =
      ::testing::TempDir() + "cerar_timeline_" + std::to_string(getpid()) + "_{rank}.json";
  runProcesses(4, [&](int rank, const Starter& start) { return timeline(rank, start, pattern); });
}

TEST(RuntimeMultiprocess, StallReportNamesTheMissingRank) {
  auto results = runProcesses(4, stallReport);
  EXPECT_EQ(results, (std::vector<std::string>{"failed", "failed", "failed", "missing"}));
}

TEST(RuntimeMultiprocess, MismatchFailsEveryRankAtNegotiation) {
  auto results = runProcesses(4, mismatch);
  for (const auto& r : results) EXPECT_EQ(r, results[0]);  // the same message everywhere
}

TEST(RuntimeMultiprocess, ShutdownWithWorkPending) { runProcesses(4, shutdownPending); }

// --- Runtime::start from the environment ----------------------------------------------------

// Forks N ranks that each set `environment(rank)` and run opsAndScales through
// Runtime::start(fromEnvironment()); returns the ranks' exit codes.
using Environment = std::vector<std::pair<std::string, std::string>>;
std::vector<int> forkRanks(int N, const std::function<Environment(int)>& environment,
                           const std::function<void()>& afterFork = {}) {
  const std::vector<pid_t> pids = testing::forkRanks(N, [&](int rank) {
    for (const auto& [name, value] : environment(rank)) setenv(name.c_str(), value.c_str(), 1);
    setenv("CERAR_CYCLE_TIME", "1", 1);
    setenv("CERAR_TIMEOUT_SECONDS", "20", 1);
    const RuntimeConfig config = RuntimeConfig::fromEnvironment();
    // The scenario's own settings give way to the environment's (and the link probe runs).
    opsAndScales(rank, [&](RuntimeConfig) { return Runtime::start(config); });
    return 0;
  });
  if (afterFork) afterFork();
  return testing::exitCodes(pids);
}

TEST(RuntimeMultiprocess, StartUnderTheLauncherWhichHostsTheStore) {
  TcpStoreServer server("127.0.0.1", 0, "s3cret");  // served after fork, as cerarrun does
  const std::string port = std::to_string(server.port());
  auto codes = forkRanks(4, [&](int rank) {
    return Environment{{"CERAR_RANK", std::to_string(rank)}, {"CERAR_SIZE", "4"},
                       {"CERAR_LOCAL_RANK", std::to_string(rank)}, {"CERAR_LOCAL_SIZE", "4"},
                       {"CERAR_RENDEZVOUS_ADDR", "127.0.0.1"}, {"CERAR_RENDEZVOUS_PORT", port},
                       {"CERAR_SECRET", "s3cret"}};
  }, [&] { server.start(); });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0, 0}));
}

TEST(RuntimeMultiprocess, StartUnderTorchrunWhereRankZeroHostsTheStore) {
  const int port = testing::freePort();
  auto codes = forkRanks(4, [&](int rank) {
    return Environment{{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "4"},
                       {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", "4"},
                       {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port - 1)},
                       {"CERAR_SECRET", "t0rch"}};
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0, 0}));
}

// CERAR_LAZY_LINKS=1 through the job settings: the ring's and the tree's links at start, an
// alltoall's on demand, its rows right.
TEST(RuntimeMultiprocess, LazyLinksStartWithTheRingAndTreeAndMakeTheRestOnDemand) {
  constexpr int N = 8;
  TcpStoreServer server("127.0.0.1", 0, "l4zy");
  const std::string port = std::to_string(server.port());
  const std::vector<pid_t> pids = testing::forkRanks(N, [&](int rank) {
    const Environment environment = {
        {"CERAR_RANK", std::to_string(rank)}, {"CERAR_SIZE", std::to_string(N)},
        {"CERAR_LOCAL_RANK", std::to_string(rank)}, {"CERAR_LOCAL_SIZE", std::to_string(N)},
        {"CERAR_RENDEZVOUS_ADDR", "127.0.0.1"}, {"CERAR_RENDEZVOUS_PORT", port},
        {"CERAR_SECRET", "l4zy"}, {"CERAR_LAZY_LINKS", "1"}, {"CERAR_SHARED_MEMORY", "0"},
        {"CERAR_MEASURE_LINK", "0"}, {"CERAR_TIMEOUT_SECONDS", "20"}};
    for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
    auto rt = Runtime::start(RuntimeConfig::fromEnvironment());
    const uint64_t atStart = rt->stats().dataLinks;
    std::vector<int64_t> rows(N);
    for (int to = 0; to < N; ++to) rows[to] = rank * 100 + to;
    Handle sent = rt->alltoall("a2a", view(rows, {N, 1}, DType::kInt64), {});
    sent.wait();
    const auto* got = reinterpret_cast<const int64_t*>(sent.output().data());
    int code = atStart == planPeers(rank, N).size() ? 0 : 1;  // rank 1: 2 links, not 7
    for (int from = 0; from < N; ++from) code |= got[from] == from * 100 + rank ? 0 : 2;
    code |= rt->stats().dataLinks == uint64_t(N - 1) ? 0 : 4;
    rt->shutdown();
    return code;
  });
  server.start();
  EXPECT_EQ(testing::exitCodes(pids), std::vector<int>(N, 0));
}

}  // namespace
}  // namespace cerar
