// The rendezvous secret policy on each launch path (docs/rendezvous.md): cerarrun's store as
// given; a store reachable from other hosts needs CERAR_SECRET on every rank; a single-host
// job without one talks through a Unix-domain socket in a private directory, not a TCP port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "core/config/config.h"
#include "variables.h"
#include "rendezvous/tcp_store.h"
#include "common/error.h"
#include "child_processes.h"
#include "runtime_scenarios.h"

namespace cerar {
namespace {

using Env = std::map<std::string, std::string>;

// A private XDG_RUNTIME_DIR for the test's sockets, restored afterwards.
struct RuntimeDir {
  std::string path;
  std::string saved;
  bool had;
  RuntimeDir() {
    char name[] = "/tmp/cerar-policy-XXXXXX";  // mkdtemp makes it 0700
    path = mkdtemp(name);
    const char* old = std::getenv("XDG_RUNTIME_DIR");
    had = old != nullptr;
    if (had) saved = old;
    setenv("XDG_RUNTIME_DIR", path.c_str(), 1);
  }
  ~RuntimeDir() {
    had ? setenv("XDG_RUNTIME_DIR", saved.c_str(), 1) : unsetenv("XDG_RUNTIME_DIR");
    rmdir(path.c_str());
  }
};

const std::string kFix = "export CERAR_SECRET=$(openssl rand -hex 16)";

TEST(SecretPolicy, EachLauncherAcrossHostsNeedsASecretOnEveryRank) {
  const std::vector<Env> launches = {
      {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node1"}},
      {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"CERAR_RENDEZVOUS_ADDR", "node1"}},
      {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_NNODES", "2"},
       {"CERAR_RENDEZVOUS_ADDR", "node1"}}};
  for (Env env : launches) {
    RuntimeConfig config = testing::configFrom(env);
    try {
      storeEndpointOf(config);
      FAIL() << "no secret across hosts was accepted";
    } catch (const InvalidArgumentError& e) {  // the user's setting, not cerar's fault
      EXPECT_NE(std::string(e.what()).find(kFix), std::string::npos) << e.what();
    }
    // Start fails the same way, before any connection (so on every rank at once).
    EXPECT_THROW(Runtime::start(config), InvalidArgumentError);
    env["CERAR_SECRET"] = "s";
    const StoreEndpoint endpoint = storeEndpointOf(testing::configFrom(env));
    EXPECT_EQ(endpoint.listen, "0.0.0.0");
    EXPECT_EQ(endpoint.connect, "node1");
  }
  // cerarrun's store is the launcher's, with its own secret: the ranks connect as told.
  const StoreEndpoint launcher = storeEndpointOf(testing::configFrom(
      {{"CERAR_RANK", "1"}, {"CERAR_SIZE", "2"}, {"CERAR_RENDEZVOUS_ADDR", "127.0.0.1"},
       {"CERAR_RENDEZVOUS_PORT", "5000"}, {"CERAR_SECRET", "x"}}));
  EXPECT_EQ(launcher.connect, "127.0.0.1");
}

TEST(SecretPolicy, SingleHostWithoutSecretUsesAPrivateUnixSocket) {
  RuntimeDir dir;
  const StoreEndpoint endpoint =
      storeEndpointOf(testing::configFrom({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "6000"}}));
  EXPECT_EQ(endpoint.listen, "unix:" + dir.path + "/cerar-store-6001.sock");
  EXPECT_EQ(endpoint.connect, endpoint.listen);
  // A runtime directory others may enter is passed over for /tmp/cerar-<uid>.
  chmod(dir.path.c_str(), 0755);
  const StoreEndpoint fallback = storeEndpointOf(
      testing::configFrom({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
  EXPECT_EQ(fallback.listen,
            "unix:/tmp/cerar-" + std::to_string(getuid()) + "/cerar-store-29501.sock");
  struct stat info {};
  ASSERT_EQ(lstat(("/tmp/cerar-" + std::to_string(getuid())).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  chmod(dir.path.c_str(), 0700);
}

// Whether this process holds a TCP socket listening on `port` (any address). Other processes
// on the machine may listen there once the port is free again, so the check looks only at
// this process's own descriptors.
bool listensOnTcpPort(int port) {
  std::set<std::string> mine;
  if (DIR* fds = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(fds)) {
      char target[256] = {};
      const std::string path = std::string("/proc/self/fd/") + entry->d_name;
      if (readlink(path.c_str(), target, sizeof target - 1) > 0 &&
          std::strncmp(target, "socket:[", 8) == 0) {
        mine.insert(std::string(target + 8, std::strlen(target) - 9));
      }
    }
    closedir(fds);
  }
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream lines(table);
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      const int localPort = int(std::stoul(local.substr(local.find(':') + 1), nullptr, 16));
      if (state == "0A" && localPort == port && mine.count(inode)) return true;
    }
  }
  return false;
}

// Two ranks under torchrun's variables and no secret: the job runs, with no TCP store port.
// The job's identity comes from its launcher (CERAR_JOB_ID overrides), and names the single-host
// socket, so that two jobs on one port and one host never share a store.
TEST(SecretPolicy, EachLaunchersJobIdentityNamesItsSocket) {
  RuntimeDir dir;
  const Env mpi = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"PMIX_NAMESPACE", "725286913"}, {"OMPI_MCA_ess_base_jobid", "725286913"}};
  EXPECT_EQ(testing::configFrom(mpi).jobId, "Open MPI job 725286913");
  EXPECT_EQ(testing::configFrom({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                 {"OMPI_MCA_ess_base_jobid", "99"}}).jobId,
            "Open MPI job 99");
  EXPECT_EQ(testing::configFrom({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                                 {"SLURM_JOB_ID", "4711"}, {"SLURM_STEP_ID", "3"}}).jobId,
            "SLURM job 4711 step 3");
  const Env torchrun = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                        {"MASTER_PORT", "6000"}, {"TORCHELASTIC_RUN_ID", "r1"}};
  EXPECT_EQ(testing::configFrom(torchrun).jobId, "torchrun run r1 at 127.0.0.1:6000");
  // RANK and WORLD_SIZE by hand name no job; CERAR_JOB_ID names it (and wins over a launcher's).
  const Env plain = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "6000"}};
  EXPECT_EQ(testing::configFrom(plain).jobId, "");
  Env named = mpi;
  named["CERAR_JOB_ID"] = "nightly";
  EXPECT_EQ(testing::configFrom(named).jobId, "nightly");
  // Sockets: the plain one as before, one per identity otherwise.
  const std::string plainSocket = storeEndpointOf(testing::configFrom(plain)).listen;
  EXPECT_EQ(plainSocket, "unix:" + dir.path + "/cerar-store-6001.sock");
  const std::string a = storeEndpointOf(testing::configFrom(torchrun)).listen;
  Env other = torchrun;
  other["TORCHELASTIC_RUN_ID"] = "r2";
  const std::string b = storeEndpointOf(testing::configFrom(other)).listen;
  EXPECT_EQ(a.rfind("unix:" + dir.path + "/cerar-store-6001-", 0), 0u) << a;
  EXPECT_NE(a, b);
  EXPECT_EQ(a, storeEndpointOf(testing::configFrom(torchrun)).listen);  // the same on every rank
}

TEST(SecretPolicy, TorchrunSingleHostJobRunsWithoutATcpStore) {
  RuntimeDir dir;
  // A port reserved below the ephemeral range: no port-0 listener (this job's data links, a
  // concurrent test's) can take it while the check below looks at it.
  const int port = testing::freePort();
  {
    TcpStoreServer probe("127.0.0.1", uint16_t(port), "");
    ASSERT_TRUE(listensOnTcpPort(port));  // the check sees a listener of this process
  }
  ASSERT_FALSE(listensOnTcpPort(port));
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 1;
      try {
        RuntimeConfig config = testing::configFrom({{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"},
                                        {"MASTER_ADDR", "127.0.0.1"},
                                        {"MASTER_PORT", std::to_string(port - 1)},
                                        {"CERAR_TIMEOUT_SECONDS", "20"},
                                        {"CERAR_MEASURE_LINK", "0"}});
        auto rt = Runtime::start(config);
        std::vector<float> ones(1000, 1.0f);
        rt->allreduce("x", scenarios::f32(ones), scenarios::f32(ones), Op::kSum).wait();
        struct stat info {};
        const std::string socket = dir.path + "/cerar-store-" + std::to_string(port) + ".sock";
        const bool served = rank != 0 || stat(socket.c_str(), &info) == 0;
        code = ones[0] == 2.0f && served && !listensOnTcpPort(port) ? 0 : 2;
        rt->shutdown();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      }
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
}

}  // namespace
}  // namespace cerar
