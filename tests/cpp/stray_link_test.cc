// A stranger connects to a rank's data-link listener while the job starts (loopback; the
// listener found from the rank's own sockets): with junk, with a well-formed Gloo message, or
// holding the connection silent. Every try must either complete with every sum checked, or
// fail on every rank within 5 s with the documented error (the pair named, "a connection that
// is not this job's"), or, for the Gloo message, end the attacked rank with status
// kStrangerExitStatus (the other rank too, where the attacked one's connection vanished as it
// was accepted); never a signal, a hang or a wrong sum.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "core/config/bootstrap.h"
#include "rendezvous/tcp_store.h"
#include "common/error.h"
#include "ops/transport/gloo_message.h"
#include "ops/transport/gloo_tcp.h"
#include "ops/transport/transport.h"
#include "tests/cpp/child_processes.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

enum class Stray { kJunk, kGlooHeader, kHeld };

constexpr int kSumsChecked = 0, kDocumentedFailure = 3, kOtherFailure = 4, kWrongSum = 5;

// One rank: starts through the store (hosted by the test, as cerarrun hosts it), then
// all-reduces 64 Ki floats by a two-rank exchange and checks every element. The exit status
// says how it went.
[[noreturn]] void runRank(int rank, int port) {
  RuntimeConfig config;
  config.rank = config.localRank = rank;
  config.size = config.localSize = 2;
  config.rendezvousPort = port;
  config.secret = "stray-test";
  config.hostStore = false;
  config.timeoutSeconds = 30;  // the start-up must fail long before this
  config.logLevel = "fatal";
  try {
    JobLinks links = connectThroughStore(config);
    Transport& t = *links.transport;
    std::vector<float> mine(1 << 16, float(rank + 1)), theirs(mine.size());
    t.postRecv(1 - rank, theirs.data(), theirs.size() * sizeof(float));
    t.postSend(1 - rank, mine.data(), mine.size() * sizeof(float));
    t.waitSend(1 - rank);
    t.waitRecv(1 - rank);
    for (size_t i = 0; i < mine.size(); ++i) {
      if (mine[i] + theirs[i] != 3.0f) std::_Exit(kWrongSum);
    }
    char done = 1, peerDone = 0;  // both have checked before either leaves
    t.postRecv(1 - rank, &peerDone, 1);
    t.postSend(1 - rank, &done, 1);
    t.waitSend(1 - rank);
    t.waitRecv(1 - rank);
    std::_Exit(kSumsChecked);
  } catch (const std::exception& e) {
    const std::string text = e.what();
    const bool documented = text.find("a connection that is not this job's") != std::string::npos &&
                            text.find("between ranks 0 and 1") != std::string::npos;
    std::fprintf(stderr, "rank %d: %s\n", rank, text.c_str());
    std::_Exit(documented ? kDocumentedFailure : kOtherFailure);
  }
}

// The TCP ports that process `pid` listens on (its socket inodes, found in /proc/net/tcp).
std::set<int> listeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* fds = opendir(dir.c_str())) {
    while (dirent* entry = readdir(fds)) {
      char target[64] = {};
      const std::string path = dir + "/" + entry->d_name;
      if (readlink(path.c_str(), target, sizeof target - 1) > 0 &&
          std::strncmp(target, "socket:[", 8) == 0) {
        inodes.insert(std::string(target + 8, std::strlen(target) - 9));
      }
    }
    closedir(fds);
  }
  std::set<int> ports;
  std::ifstream table("/proc/" + std::to_string(pid) + "/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream in(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    in >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >>
        inode;
    if (state == "0A" && inodes.count(inode)) {
      ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

// Gloo 0.5.0's message preamble (six size_t: nbytes, opcode, slot, offset, length, roffset)
// of a send into an unbound buffer, then its 16 bytes: the receiver has no such receive posted.
std::vector<char> glooHeader() {
  const size_t preamble[6] = {6 * sizeof(size_t) + 16, 1, 0x4300000000000000ull, 0, 16, 0};
  std::vector<char> out(reinterpret_cast<const char*>(preamble),
                        reinterpret_cast<const char*>(preamble) + sizeof preamble);
  out.resize(out.size() + 16, 'x');
  return out;
}

// Connects to the first listener of `victim` other than `storePort`, sends what `kind` says
// and keeps the connection until `stop`. Returns whether it got in.
bool strike(pid_t victim, int storePort, Stray kind, const std::atomic<bool>& stop, int& fd) {
  while (!stop) {
    for (int port : listeningPorts(victim)) {
      if (port == storePort) continue;
      fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(uint16_t(port));
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close(fd);
        fd = -1;
        continue;
      }
      std::vector<char> bytes;
      if (kind == Stray::kJunk) {
        std::mt19937 random(std::random_device{}());
        for (int i = 0; i < 4096; ++i) bytes.push_back(char(random()));
      } else if (kind == Stray::kGlooHeader) {
        bytes = glooHeader();
      }
      if (!bytes.empty()) (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      return true;
    }
  }
  return false;
}

struct Tally {
  int checked = 0, failedAlike = 0, strangerExit = 0, struck = 0;
};

// One job of two ranks with a stranger on `victim`'s listener.
void tryOnce(Stray kind, int victim, Tally& tally) {
  // A rank that ends during start-up takes down a store in its process, and the others' first
  // connection to it then waits for the store to appear (docs/rendezvous.md); cerarrun's store
  // outlives the ranks, so the test's does.
  TcpStoreServer store("127.0.0.1", 0, "stray-test");
  const int port = store.port();
  const auto start = Clock::now();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) runRank(rank, port);
    pids.push_back(pid);
  }
  store.start();
  std::atomic<bool> stop{false};
  int fd = -1;
  bool struck = false;
  std::thread stranger([&] { struck = strike(pids[victim], port, kind, stop, fd); });
  const std::vector<int> codes = testing::exitCodes(pids, 20s);
  const auto elapsed = Clock::now() - start;
  stop = true;
  stranger.join();
  if (fd >= 0) close(fd);
  tally.struck += struck;
  const std::string what = detail::concat("victim rank ", victim, ", exit codes ", codes[0], " ",
                                          codes[1], ", ", elapsed / 1ms, " ms");
  if (codes[0] == kSumsChecked && codes[1] == kSumsChecked) {
    ++tally.checked;
    return;
  }
  EXPECT_LT(elapsed, 5s) << what;
  for (int rank = 0; rank < 2; ++rank) {
    // The other rank may find the victim's connection gone as Gloo's network thread accepts
    // it (getpeername fails once the victim gave up): it ends as the stranger's target would.
    const bool peerGone = rank != victim && codes[victim] == kDocumentedFailure &&
                          codes[rank] == kStrangerExitStatus;
    const bool allowed = codes[rank] == kDocumentedFailure || peerGone ||
                         (kind == Stray::kGlooHeader && rank == victim &&
                          codes[rank] == kStrangerExitStatus);
    EXPECT_TRUE(allowed) << "rank " << rank << ": " << what;
  }
  const bool exited = codes[victim] == kStrangerExitStatus;
  tally.strangerExit += exited;
  tally.failedAlike += !exited;
}

void tryTwenty(Stray kind, const char* name) {
  Tally tally;
  for (int i = 0; i < 20; ++i) tryOnce(kind, i % 2, tally);
  std::printf("%s: 20 tries, stranger got in %d, sums checked %d, failed alike %d, "
              "attacked rank exited with status %d: %d\n",
              name, tally.struck, tally.checked, tally.failedAlike, kStrangerExitStatus,
              tally.strangerExit);
}

// Gloo 0.5.0 prints ports in network byte order; cerar repeats them as the kernel knows them.
TEST(StrayLink, GloosPortsArePrintedAsTheRealOnes) {
  EXPECT_EQ(realPorts("connect [127.0.0.1]:17315: Connection refused"),
            "connect [127.0.0.1]:41795: Connection refused");
  EXPECT_EQ(realPorts("Read error [::1]:256 and [10.0.0.2]:1"),
            "Read error [::1]:1 and [10.0.0.2]:256");
  EXPECT_EQ(realPorts("no address here"), "no address here");
}

TEST(StrayLink, JunkOnAListenerFailsEveryRankOrNone) { tryTwenty(Stray::kJunk, "junk"); }
TEST(StrayLink, AGlooMessageOnAListenerNeverAbortsARank) {
  tryTwenty(Stray::kGlooHeader, "gloo header");
}
TEST(StrayLink, AHeldConnectionFailsEveryRankOrNone) { tryTwenty(Stray::kHeld, "held"); }

}  // namespace
}  // namespace cerar
