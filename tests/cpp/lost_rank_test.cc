// A rank killed in the middle of all-reduces, with ranks started as torchrun starts them (rank 0
// hosts the store; no launcher ends the survivors): every survivor's handle throws
// PeerLostError naming the killed rank (core/control/blame.h), soon after the kill. Also when no
// survivor can see its links close: then the store's evidence decides.
#include <gtest/gtest.h>

#include "child_processes.h"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/runtime.h"
#include "common/error.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

// Forks a child that keeps this process's sockets open, except its connection to the store at
// `storePort`, and then sleeps: once this process is killed, its peers' links stay silent
// (as if their transport were too slow to read the close) while the store sees it go. Returns
// the child's pid. Only async-signal-safe calls in the child (this process has threads).
pid_t holdLinksOpen(int storePort) {
  const pid_t child = fork();
  if (child != 0) return child;
  for (int fd = 0; fd < 1024; ++fd) {
    sockaddr_in peer{};
    socklen_t length = sizeof peer;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) == 0 &&
        peer.sin_family == AF_INET && ntohs(peer.sin_port) == storePort) {
      close(fd);
    }
  }
  for (;;) pause();
}

// A rank: all-reduces until one fails, then writes "<code> <peer>" to `out`. The victim of a
// test that holds its links open writes "holder <pid>" after "ready".
[[noreturn]] void rankMain(int rank, int port, int out, bool holdLinks) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", "4", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port - 1).c_str(), 1);
  setenv("CERAR_SECRET", "lost", 1);
  setenv("CERAR_TIMEOUT_SECONDS", "3", 1);
  setenv("CERAR_LOG_LEVEL", "fatal", 1);
  std::string line = "none";
  try {
    auto rt = Runtime::start(RuntimeConfig::fromEnvironment());
    std::vector<float> data(1 << 20, 1.0f);
    Tensor t{data.data(), DType::kFloat32, {int64_t(data.size())}};
    rt->allreduce("warmup", t, t, Op::kSum).wait();
    if (write(out, "ready\n", 6) != 6) _exit(3);
    if (holdLinks) {
      const std::string holder = "holder " + std::to_string(holdLinksOpen(port)) + "\n";
      if (write(out, holder.data(), holder.size()) < 0) _exit(3);
    }
    for (int step = 0;; ++step) {
      rt->allreduce("step." + std::to_string(step), t, t, Op::kSum).wait();
    }
  } catch (const Error& e) {
    line = std::to_string(int(e.code())) + " " + std::to_string(e.peer()) + "\n";
  } catch (...) {
  }
  if (write(out, line.data(), line.size()) < 0) _exit(4);
  _exit(0);  // the runtime failed: nothing to shut down cleanly
}

// A line from `fd`, or what arrived before 30 s passed (a hung rank must not hang the test).
std::string readLine(int fd) {
  std::string line;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  pollfd wait{fd, POLLIN, 0};
  char c;
  while (Clock::now() < deadline && poll(&wait, 1, 100) >= 0) {
    if (!(wait.revents & (POLLIN | POLLHUP))) continue;
    if (read(fd, &c, 1) != 1 || c == '\n') break;
    line += c;
  }
  return line;
}

// Starts 4 ranks, kills rank 2 mid-loop; returns each survivor's "<code> <peer>" line, and
// how long after the kill the last one came.
void killRankTwo(bool holdLinks, std::vector<std::string>& results, double& seconds) {
  const int port = testing::freePort();
  const int victim = 2;
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int rank = 0; rank < 4; ++rank) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      rankMain(rank, port, fds[1], holdLinks && rank == victim);
    }
    close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::vector<std::string> ready;
  for (int fd : pipes) ready.push_back(readLine(fd));
  pid_t holder = 0;
  if (holdLinks) {
    const std::string line = readLine(pipes[victim]);
    EXPECT_EQ(line.rfind("holder ", 0), 0u) << line;
    if (line.rfind("holder ", 0) == 0) holder = std::stoi(line.substr(7));
  }
  usleep(300000);  // in the middle of the loop
  kill(pids[victim], SIGKILL);
  const auto struck = Clock::now();
  results.assign(4, "");
  for (int rank = 0; rank < 4; ++rank) {
    if (rank != victim) results[rank] = readLine(pipes[rank]);
  }
  seconds = std::chrono::duration<double>(Clock::now() - struck).count();
  if (holder > 0) kill(holder, SIGKILL);  // the victim's child: init reaps it
  for (int rank = 0; rank < 4; ++rank) {
    kill(pids[rank], SIGKILL);
    waitpid(pids[rank], nullptr, 0);
    close(pipes[rank]);
  }
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(ready[rank], "ready") << rank;
}

TEST(LostRank, EverySurvivorNamesTheKilledRank) {
  std::vector<std::string> results;
  double seconds = 0;
  killRankTwo(/*holdLinks=*/false, results, seconds);
  for (int rank : {0, 1, 3}) {
    EXPECT_EQ(results[rank], std::to_string(int(StatusCode::kPeerLost)) + " 2") << rank;
  }
  // The timeout, the agreement's window and slack for a loaded machine's late wake-ups.
  EXPECT_LT(seconds, 3 + 1.5 + 5);
}

// What a loaded machine can do by chance, made certain: every survivor times out before its
// links show the close. The victim's store connection closed without a goodbye, so it is
// still known to be dead (not frozen, which would be a timeout).
TEST(LostRank, AKilledRankWhoseLinksStayOpenIsStillLost) {
  std::vector<std::string> results;
  double seconds = 0;
  killRankTwo(/*holdLinks=*/true, results, seconds);
  for (int rank : {0, 1, 3}) {
    EXPECT_EQ(results[rank], std::to_string(int(StatusCode::kPeerLost)) + " 2") << rank;
  }
}

}  // namespace
}  // namespace cerar
