// Helpers for tests that fork ranks themselves (launcher or torchrun-style starts).
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

namespace cerar::testing {

// A loopback TCP port that was free a moment ago.
inline int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t length = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
  close(fd);
  return ntohs(addr.sin_port);
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
