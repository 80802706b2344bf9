// The rendezvous store against hostile or broken clients: garbage, huge lengths, idle and
// parked connections, descriptor exhaustion, overflowing numbers. Each is refused or bounded,
// the authenticated clients keep working, and CPU and descriptors are measured.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <dirent.h>
#include <fstream>
#include <thread>

#include <gloo/common/error.h>
#include <gtest/gtest.h>

#include "rendezvous/tcp_store.h"
#include "rendezvous/framing.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;
using namespace store_framing;

std::vector<char> bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

int openDescriptors() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n - 3;  // ".", ".." and the directory's own descriptor
}

// CPU seconds of this process (the test thread sleeps meanwhile: it is the server's).
double cpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// A client speaking the wire protocol by hand, or not speaking it at all.
struct Raw {
  int fd = -1;
  explicit Raw(uint16_t port) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd);
      fd = -1;
    }
  }
  ~Raw() {
    if (fd >= 0) close(fd);
  }
  void send(const std::vector<char>& data) const {
    ASSERT_EQ(::send(fd, data.data(), data.size(), MSG_NOSIGNAL), ssize_t(data.size()));
  }
  void request(Op op, const std::vector<char>& fields) const {
    send(frame(static_cast<uint8_t>(op), fields));
  }
  void hello(const std::string& secret) const {
    Writer w;
    w.str(secret);
    request(Op::kHello, w.data);
  }
  // The status of the next reply, or -1 when the server closed the connection first. The
  // limit only bounds a failure: a loaded machine may take seconds to answer.
  int status(std::chrono::milliseconds limit = 15s) const {
    char buffer[4096];
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, int(limit.count())) <= 0) return -2;  // nothing in time
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    return n >= 5 ? buffer[4] : -1;
  }
  bool closedByServer(std::chrono::milliseconds limit = 15s) const {
    return status(limit) == -1;
  }
};

// Polls `done` until it holds or 15 s pass (a loaded machine delays the server's thread).
template <typename Predicate>
bool eventually(Predicate done) {
  for (int i = 0; i < 1500 && !done(); ++i) std::this_thread::sleep_for(10ms);
  return done();
}

std::vector<char> waitFields(const std::string& key, int64_t timeoutMs) {
  Writer w;
  w.put<int64_t>(timeoutMs);
  w.strs({key});
  return w.data;
}

TEST(TcpStoreLimits, StrangersAreRefusedAndTheJobIsUnaffected) {
  TcpStoreServer server("127.0.0.1", 0, "right");
  server.start();
  TcpStore rank0("127.0.0.1", server.port(), "right", 5s);
  rank0.set("addr/0", bytes("a0"));
  {
    Raw noSecret(server.port());
    noSecret.hello("");
    EXPECT_EQ(noSecret.status(), int(ReplyStatus::kRejected));
    Raw wrong(server.port());
    wrong.hello("wrong");
    EXPECT_EQ(wrong.status(), int(ReplyStatus::kRejected));
    Raw skipsHello(server.port());
    skipsHello.request(Op::kGet, waitFields("addr/0", 0));
    EXPECT_EQ(skipsHello.status(), int(ReplyStatus::kRejected));
    Raw garbage(server.port());
    garbage.send(std::vector<char>(64, '\xff'));  // a 4 GiB claim before any secret
    EXPECT_TRUE(garbage.closedByServer());
  }
  EXPECT_THROW(TcpStore("127.0.0.1", server.port(), "", 1s), gloo::IoException);
  TcpStore rank1("127.0.0.1", server.port(), "right", 5s);
  EXPECT_EQ(rank1.get("addr/0"), bytes("a0"));
}

// This process's resident memory (VmRSS), in KiB.
long residentKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  long kb = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) kb = std::stol(line.substr(6));
  }
  return kb;
}

TEST(TcpStoreLimits, HugeLengthsAreRefusedAndClaimsCostNothing) {
  StoreLimits limits;
  limits.connectionQuotaBytes = 64 << 20;
  TcpStoreServer server("127.0.0.1", 0, "k", limits);
  server.start();
  const long before = residentKb();
  Raw huge(server.port());
  huge.hello("k");
  ASSERT_EQ(huge.status(), int(ReplyStatus::kOk));
  huge.send({0, 0, 0, 0x40});  // 2^30 bytes: past the quota, closed at once
  EXPECT_TRUE(huge.closedByServer());
  // Within the quota but never sent: the server holds only what arrived (one chunk).
  std::vector<std::unique_ptr<Raw>> claims;
  for (int i = 0; i < 20; ++i) {
    claims.push_back(std::make_unique<Raw>(server.port()));
    claims.back()->hello("k");
    ASSERT_EQ(claims.back()->status(), int(ReplyStatus::kOk));
    claims.back()->send({0, 0, 0, 0x03, char(Op::kSet)});  // claims 48 MiB
  }
  std::this_thread::sleep_for(100ms);
  // What the claims added: the process's own size depends on what ran in it before (a whole
  // test binary in one process, a sanitizer's shadow memory), two claims' worth does not.
  EXPECT_LT(residentKb() - before, 96 * 1024) << "20 claims of 48 MiB must not be allocated";
  TcpStore job("127.0.0.1", server.port(), "k", 5s);
  job.set("x", bytes("1"));
  EXPECT_EQ(job.get("x"), bytes("1"));
}

TEST(TcpStoreLimits, KeyValueAndQuotaLimitsAnswerWithErrors) {
  StoreLimits limits;
  limits.maxKeyBytes = 16;
  limits.maxValueBytes = 1000;
  limits.connectionQuotaBytes = 4096;
  TcpStoreServer server("127.0.0.1", 0, "k", limits);
  server.start();
  TcpStore store("127.0.0.1", server.port(), "k", 5s);
  try {
    store.set("v", std::vector<char>(1001));
    FAIL() << "an oversized value was stored";
  } catch (const gloo::IoException& e) {
    EXPECT_NE(std::string(e.what()).find("CERAR_STORE_MAX_VALUE_BYTES"), std::string::npos);
  }
  EXPECT_THROW(store.set(std::string(17, 'k'), bytes("v")), gloo::IoException);
  EXPECT_THROW(store.check({std::string(17, 'k')}), gloo::IoException);
  int stored = 0;
  try {
    for (; stored < 10; ++stored) store.set("v" + std::to_string(stored), std::vector<char>(1000));
  } catch (const gloo::IoException& e) {
    EXPECT_NE(std::string(e.what()).find("quota"), std::string::npos) << e.what();
  }
  EXPECT_EQ(stored, 4);
  EXPECT_EQ(store.get("v0").size(), 1000u);  // still served
}

TEST(TcpStoreLimits, ThousandIdleConnectionsAreCappedAndTimedOut) {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  const rlim_t want = std::min<rlim_t>(files.rlim_max, 4096);
  rlimit raised = files;
  raised.rlim_cur = std::max(files.rlim_cur, want);
  setrlimit(RLIMIT_NOFILE, &raised);
  const int idle = raised.rlim_cur >= 2200 ? 1000 : int(raised.rlim_cur / 3);
  StoreLimits limits;
  limits.maxConnections = 64;
  limits.helloTimeout = 500ms;
  TcpStoreServer server("127.0.0.1", 0, "k", limits);
  server.start();
  TcpStore rank0("127.0.0.1", server.port(), "k", 5s);
  TcpStore rank1("127.0.0.1", server.port(), "k", 5s);
  const int fdsBefore = openDescriptors();
  const double cpuBefore = cpuSeconds();
  std::vector<std::unique_ptr<Raw>> strangers;
  for (int i = 0; i < idle; ++i) strangers.push_back(std::make_unique<Raw>(server.port()));
  {
    // A rank arriving after the flood still gets in, and the ranks inside keep working.
    TcpStore late("127.0.0.1", server.port(), "k", 5s);
    late.set("a", bytes("0"));
    EXPECT_EQ(rank1.get("a"), bytes("0"));
    rank0.set("b", bytes("1"));
    EXPECT_EQ(late.get("b"), bytes("1"));
    EXPECT_LE(server.connections(), limits.maxConnections);
  }
  std::this_thread::sleep_for(1200ms);  // past the hello timeout
  EXPECT_TRUE(eventually([&] { return server.connections() == 2u; })) << server.connections();
  const double cpu = cpuSeconds() - cpuBefore;
  strangers.clear();
  EXPECT_TRUE(eventually([&] { return openDescriptors() == fdsBefore; }))
      << openDescriptors() - fdsBefore << " descriptors leaked";
  EXPECT_LT(cpu, 1.0) << idle << " connections cost " << cpu << " s of CPU";
  RecordProperty("cpu_ms", int(cpu * 1000));
  setrlimit(RLIMIT_NOFILE, &files);
}

TEST(TcpStoreLimits, ParkedWaitThenDisconnectFreesTheDescriptor) {
  TcpStoreServer server("127.0.0.1", 0, "k");
  server.start();
  const int fdsBefore = openDescriptors();
  {
    std::vector<std::unique_ptr<Raw>> parked;
    for (int i = 0; i < 50; ++i) {
      parked.push_back(std::make_unique<Raw>(server.port()));
      parked.back()->hello("k");
      ASSERT_EQ(parked.back()->status(), int(ReplyStatus::kOk));
      parked.back()->request(Op::kWait, waitFields("never", 0));  // no limit
    }
    EXPECT_TRUE(eventually([&] { return server.connections() == 50u; })) << server.connections();
    EXPECT_TRUE(eventually([&] { return openDescriptors() == fdsBefore + 100; }))
        << openDescriptors() - fdsBefore;
  }
  EXPECT_TRUE(eventually([&] { return server.connections() == 0u; })) << server.connections();
  EXPECT_EQ(openDescriptors(), fdsBefore);
  // A parked client that sends anyway breaks the protocol and is closed.
  Raw rude(server.port());
  rude.hello("k");
  ASSERT_EQ(rude.status(), int(ReplyStatus::kOk));
  rude.request(Op::kWait, waitFields("never", 0));
  rude.request(Op::kCheck, {0, 0, 0, 0});
  EXPECT_TRUE(rude.closedByServer());
}

TEST(TcpStoreLimits, DescriptorExhaustionBacksOffInsteadOfSpinning) {
  TcpStoreServer server("127.0.0.1", 0, "k");
  server.start();
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  rlimit low = files;
  low.rlim_cur = openDescriptors() + 16;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd; (fd = open("/dev/null", O_RDONLY)) >= 0;) filler.push_back(fd);
  close(filler.back());  // room for one client socket, none for the server's side
  filler.pop_back();
  Raw waiting(server.port());  // in the backlog: the server's accept fails with EMFILE
  ASSERT_GE(waiting.fd, 0);
  const double before = cpuSeconds();
  std::this_thread::sleep_for(2s);
  const double cpu = cpuSeconds() - before;
  for (int fd : filler) close(fd);
  setrlimit(RLIMIT_NOFILE, &files);
  EXPECT_LT(cpu, 0.1) << "the accept loop used " << cpu << " s of CPU in 2 s";
  RecordProperty("cpu_ms", int(cpu * 1000));
  // Descriptors back: the waiting client is served.
  waiting.hello("k");
  EXPECT_EQ(waiting.status(), int(ReplyStatus::kOk));
}

TEST(TcpStoreLimits, HugeTimeoutsSaturateAndAddIsChecked) {
  TcpStoreServer server("127.0.0.1", 0, "k");
  server.start();
  TcpStore store("127.0.0.1", server.port(), "k", std::chrono::milliseconds::max());
  std::thread writer([port = server.port()] {
    TcpStore other("127.0.0.1", port, "k", 5s);
    std::this_thread::sleep_for(100ms);
    other.set("late", bytes("x"));
  });
  store.wait({"late"}, std::chrono::milliseconds::max());  // would time out at once if wrapped
  EXPECT_EQ(store.get("late"), bytes("x"));
  writer.join();
  EXPECT_EQ(store.add("c", INT64_MAX), INT64_MAX);
  EXPECT_THROW(store.add("c", 1), gloo::IoException);
  EXPECT_EQ(store.add("c", -1), INT64_MAX - 1);
  EXPECT_EQ(store.add("d", INT64_MIN), INT64_MIN);
  EXPECT_THROW(store.add("d", -1), gloo::IoException);
}

TEST(TcpStoreLimits, UnixSocketServesInAPrivateDirectory) {
  char dir[] = "/tmp/cerar-store-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string("unix:") + dir + "/store.sock";
  {
    TcpStoreServer server(path, 0, "");
    server.start();
    TcpStore store(path, 0, "", 5s);
    store.set("k", bytes("v"));
    EXPECT_EQ(store.get("k"), bytes("v"));
    EXPECT_EQ(store.address(), path);
  }
  struct stat info{};
  EXPECT_NE(stat((std::string(dir) + "/store.sock").c_str(), &info), 0) << "socket left behind";
  rmdir(dir);
}

}  // namespace
}  // namespace cerar
