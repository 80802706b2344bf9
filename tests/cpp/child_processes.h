// Helpers for tests that fork ranks themselves (launcher or torchrun-style starts).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace cerar::testing {

// `count` consecutive loopback TCP ports that a rank will bind later, reserved for this
// process. They lie below the kernel's ephemeral range, so no connect() or bind(port 0) of a
// concurrent test can take them meanwhile; a lock file per port (held until exit, released
// by the kernel even on a crash) keeps two concurrent tests from choosing the same ones.
inline int freePort(int count = 1) {
  int low = 32768, high = 60999;
  if (FILE* range = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(range, "%d %d", &low, &high) != 2) low = 32768;
    std::fclose(range);
  }
  // Below the ephemeral range where there is room, else above it.
  const int first = low > 12000 ? 10000 : high + 1;
  const int last = (low > 12000 ? low : 65536) - count;
  mkdir("/tmp/cerar-test-ports", 0777);
  std::mt19937 random(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int base = std::uniform_int_distribution<int>(first, last - 1)(random);
    std::vector<int> held;
    bool ok = true;
    for (int port = base; ok && port < base + count; ++port) {
      const std::string path = "/tmp/cerar-test-ports/" + std::to_string(port);
      const int lock = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666);
      ok = lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) == 0;
      if (lock >= 0) held.push_back(lock);
      const int fd = ok ? socket(AF_INET, SOCK_STREAM, 0) : -1;
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(port));
      ok = ok && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      if (fd >= 0) close(fd);
    }
    if (ok) return base;  // the locks stay held: their descriptors are never closed
    for (int lock : held) close(lock);
  }
  std::fprintf(stderr, "no %d free consecutive loopback ports in [%d, %d)\n", count, first, last);
  std::abort();
}

// Forks `count` ranks, each running body(rank) in its child and exiting with what it returns
// (1, its message on stderr, when it throws); the ranks' pids, in rank order.
inline std::vector<pid_t> forkRanks(int count, const std::function<int(int)>& body) {
  std::fflush(nullptr);  // no buffered output written twice
  std::vector<pid_t> pids;
  for (int rank = 0; rank < count; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 1;
      try {
        code = body(rank);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      }
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  return pids;
}

// Waits for every child; one still running after `limit` is killed. Returns the exit codes
// (128 + signal for a killed or crashed child).
inline std::vector<int> exitCodes(const std::vector<pid_t>& pids,
                                  std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::vector<int> codes;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) kill(pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

}  // namespace cerar::testing
