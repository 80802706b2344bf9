// The rendezvous store: set/get, blocking get, timeouts, counters, the job secret, the key a
// connection leaves for its loss.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gloo/common/error.h>
#include <gtest/gtest.h>

#include "rendezvous/tcp_store.h"
#include "rendezvous/framing.h"
#include "common/error.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::vector<char> bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

long msSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

TEST(TcpStore, SetGetCheckAndLocalRead) {
  TcpStoreServer server("127.0.0.1", 0, "s3cret");
  server.start();
  TcpStore store("127.0.0.1", server.port(), "s3cret", 2s);
  EXPECT_FALSE(store.check({"a"}));
  store.set("a", bytes("alpha"));
  store.set("empty", {});
  EXPECT_EQ(store.get("a"), bytes("alpha"));
  EXPECT_TRUE(store.get("empty").empty());
  EXPECT_TRUE(store.check({"a", "empty"}));
  EXPECT_FALSE(store.check({"a", "b"}));
  store.set("a", bytes("again"));  // documented: a second set overwrites
  EXPECT_EQ(store.get("a"), bytes("again"));
  EXPECT_EQ(server.tryGet("a"), bytes("again"));
  EXPECT_FALSE(server.tryGet("b").has_value());
  std::vector<char> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  store.set("big", big);
  EXPECT_EQ(store.get("big"), big);
}

TEST(TcpStore, TrafficCountsEveryRequestAndItsBytes) {
  TcpStoreServer server("127.0.0.1", 0, "s3cret");
  server.start();
  TcpStore store("127.0.0.1", server.port(), "s3cret", 2s);
  const TcpStore::Traffic hello = store.traffic();
  EXPECT_EQ(hello.requests, 1u);  // the secret
  EXPECT_EQ(hello.bytesSent, 4u + 1 + 4 + 6 + 4);  // length, op, secret, no job identity
  EXPECT_EQ(hello.bytesReceived, 4u + 1);      // length, status
  store.set("key", bytes("value"));
  EXPECT_EQ(store.get("key"), bytes("value"));
  EXPECT_TRUE(store.check({"key"}));
  const TcpStore::Traffic after = store.traffic();
  EXPECT_EQ(after.requests, 4u);
  // set: length, op, key, value; its reply is a status alone
  EXPECT_GE(after.bytesSent - hello.bytesSent, 4u + 1 + (4 + 3) + (4 + 5));
  EXPECT_GE(after.bytesReceived - hello.bytesReceived, 3 * 5u + 5);  // get's reply holds "value"
}

TEST(TcpStore, GetBlocksUntilAnotherClientSets) {
  TcpStoreServer server("127.0.0.1", 0, "k");
  server.start();
  TcpStore reader("127.0.0.1", server.port(), "k", 5s);
  std::thread writer([port = server.port()] {
    TcpStore store("127.0.0.1", port, "k", 5s);
    std::this_thread::sleep_for(150ms);
    store.set("late", bytes("here"));
    store.set("late2", bytes("too"));
  });
  auto start = Clock::now();
  EXPECT_EQ(reader.get("late"), bytes("here"));
  EXPECT_GE(msSince(start), 100);
  reader.wait({"late", "late2"});
  writer.join();
}

TEST(TcpStore, TimedWaitAndGetThrowGlooIoException) {
  TcpStoreServer server("127.0.0.1", 0, "k");
  server.start();
  TcpStore store("127.0.0.1", server.port(), "k", 300ms);
  auto start = Clock::now();
  try {
    store.wait({"never"}, 200ms);
    FAIL() << "wait did not time out";
  } catch (const gloo::IoException& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:"), std::string::npos) << e.what();
  }
  EXPECT_GE(msSince(start), 190);
  EXPECT_LT(msSince(start), 2000);
  EXPECT_THROW(store.get("never"), gloo::IoException);  // the client's 300 ms
  // The connection survives a server-side timeout.
  store.set("x", bytes("1"));
  EXPECT_EQ(store.get("x"), bytes("1"));
}

TEST(TcpStore, AddIsAnAtomicCounter) {
  TcpStoreServer server("127.0.0.1", 0, "k");
  server.start();
  std::vector<std::thread> threads;
  std::atomic<int64_t> maxSeen{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, port = server.port()] {
      TcpStore store("127.0.0.1", port, "k", 5s);
      for (int i = 0; i < 50; ++i) {
        int64_t now = store.add("counter", 1);
        int64_t seen = maxSeen.load();
        while (now > seen && !maxSeen.compare_exchange_weak(seen, now)) {
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  TcpStore store("127.0.0.1", server.port(), "k", 5s);
  EXPECT_EQ(maxSeen.load(), 200);
  EXPECT_EQ(store.add("counter", -10), 190);
  EXPECT_EQ(store.get("counter"), bytes("190"));
  store.set("text", bytes("abc"));
  EXPECT_THROW(store.add("text", 1), gloo::IoException);
}

TEST(TcpStore, WrongSecretIsRejected) {
  TcpStoreServer server("127.0.0.1", 0, "right");
  server.start();
  try {
    TcpStore store("127.0.0.1", server.port(), "wrong", 2s);
    FAIL() << "a wrong secret was accepted";
  } catch (const gloo::IoException& e) {
    EXPECT_NE(std::string(e.what()).find("rendezvous store rejected the job secret"),
              std::string::npos)
        << e.what();
  }
  // The server keeps serving the right clients.
  TcpStore store("127.0.0.1", server.port(), "right", 2s);
  store.set("k", bytes("v"));
  EXPECT_EQ(store.get("k"), bytes("v"));
}

// One job, one store: a client presenting another job's identity (or none, to a store that has
// one) is refused at its hello, at once and by name, and can post nothing; the job goes on.
TEST(TcpStore, AClientOfAnotherJobIsRefusedAtItsHello) {
  TcpStoreServer server("127.0.0.1", 0, "s", {}, "Open MPI job 7");
  server.start();
  TcpStore mine("127.0.0.1", server.port(), "s", 2s, "Open MPI job 7");
  mine.set("k", bytes("v"));
  for (const std::string foreign : {"Open MPI job 8", ""}) {
    const auto start = std::chrono::steady_clock::now();
    try {
      TcpStore other("127.0.0.1", server.port(), "s", 5s, foreign);
      FAIL() << "a client of '" << foreign << "' joined the store of 'Open MPI job 7'";
    } catch (const ForeignJobError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("belongs to another job (Open MPI job 7)"), std::string::npos) << what;
      EXPECT_NE(what.find(foreign.empty() ? "none known" : foreign), std::string::npos) << what;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);  // refused, not retried
  }
  EXPECT_EQ(mine.get("k"), bytes("v"));
  EXPECT_FALSE(server.tryGet("k2").has_value());
  mine.set("k2", bytes("w"));  // the job's own connection is untouched
  EXPECT_EQ(mine.get("k2"), bytes("w"));
  // A store without an identity (plain variables' rank 0) admits any client, as before.
  TcpStoreServer plain("127.0.0.1", 0, "s");
  plain.start();
  TcpStore any("127.0.0.1", plain.port(), "s", 2s, "SLURM job 3 step 0");
  any.set("k", bytes("v"));
}

TEST(TcpStore, ClientWaitsForAServerThatStartsLater) {
  // Bound but not serving yet: how a launcher uses it around fork().
  TcpStoreServer server("127.0.0.1", 0, "k");
  std::thread starter([&] {
    std::this_thread::sleep_for(200ms);
    server.start();
  });
  TcpStore store("127.0.0.1", server.port(), "k", 5s);
  store.set("k", bytes("v"));
  starter.join();
  EXPECT_EQ(server.tryGet("k"), bytes("v"));
}

TEST(TcpStore, NoServerFailsWithinTheTimeoutNamingTheAddress) {
  uint16_t port;
  {
    TcpStoreServer probe("127.0.0.1", 0, "");
    port = probe.port();
  }
  auto start = Clock::now();
  try {
    TcpStore store("127.0.0.1", port, "", 300ms);
    FAIL() << "connected to nothing";
  } catch (const gloo::IoException& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(msSince(start), 2000);
}

// A client as a process that is killed: it says hello, leaves `key`, and its socket closes
// (as the kernel closes a dead process's sockets), with no goodbye.
void connectLeaveKeyAndDie(uint16_t port, const std::string& secret, const std::string& key) {
  using namespace store_framing;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  Writer hello, onLoss;
  hello.str(secret);
  onLoss.str(key);
  onLoss.bytes("", 0);
  for (const auto& request : {frame(uint8_t(Op::kHello), hello.data),
                              frame(uint8_t(Op::kOnLoss), onLoss.data)}) {
    ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), ssize_t(request.size()));
    char reply[5];  // length 1, then the status
    ASSERT_EQ(recv(fd, reply, sizeof reply, MSG_WAITALL), ssize_t(sizeof reply));
    ASSERT_EQ(reply[4], char(ReplyStatus::kOk));
  }
  close(fd);
}

TEST(TcpStore, AConnectionThatEndsWithoutGoodbyeLeavesItsKey) {
  TcpStoreServer server("127.0.0.1", 0, "k");
  server.start();
  TcpStore survivor("127.0.0.1", server.port(), "k", 30s);
  connectLeaveKeyAndDie(server.port(), "k", "job/gone/2");
  EXPECT_TRUE(survivor.get("job/gone/2").empty());  // blocks until the server has seen it close
}

TEST(TcpStore, AGoodbyeTakesTheKeyBack) {
  TcpStoreServer server("127.0.0.1", 0, "k");
  server.start();
  TcpStore survivor("127.0.0.1", server.port(), "k", 30s);
  {
    TcpStore leaving("127.0.0.1", server.port(), "k", 30s);
    leaving.setOnLoss("job/gone/1", bytes("dead"), 30s);
    leaving.setOnLoss("job/gone/3", bytes("dead"), 30s);  // replaces the first
  }  // the destructor says goodbye
  const auto deadline = Clock::now() + 60s;
  while (server.connections() > 1 && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(server.connections(), 1u);  // the goodbye is handled
  EXPECT_FALSE(survivor.check({"job/gone/1"}));
  EXPECT_FALSE(survivor.check({"job/gone/3"}));
}

TEST(TcpStore, ServerRefusesABusyPort) {
  TcpStoreServer server("127.0.0.1", 0, "");
  EXPECT_THROW(TcpStoreServer("127.0.0.1", server.port(), ""), StoreAddressInUseError);
}

// A server that says ok to the hello, then answers the next request with `reply` (raw bytes:
// a frame or less) and closes. Returns its port.
uint16_t fakeStore(std::thread& thread, std::vector<char> reply) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(listen(listener, 1), 0);
  socklen_t size = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &size);
  thread = std::thread([listener, reply] {
    const int fd = accept(listener, nullptr, nullptr);
    auto readFrame = [fd] {
      unsigned char header[4];
      if (recv(fd, header, 4, MSG_WAITALL) != 4) return;
      std::vector<char> body(store_framing::decodeLength({header[0], header[1], header[2],
                                                            header[3]}));
      recv(fd, body.data(), body.size(), MSG_WAITALL);
    };
    readFrame();  // the hello
    const char ok[] = {1, 0, 0, 0, char(store_framing::ReplyStatus::kOk)};
    send(fd, ok, sizeof ok, MSG_NOSIGNAL);
    readFrame();
    send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    close(fd);
    close(listener);
  });
  return ntohs(addr.sin_port);
}

// A reply the protocol cannot hold is the store's internal error, not a Gloo or standard one.
TEST(TcpStore, AMalformedReplyIsAnInternalError) {
  const char ok = char(store_framing::ReplyStatus::kOk);
  for (const std::vector<char>& reply :
       {std::vector<char>{3, 0, 0, 0, ok, 1, 2},  // add's counter cut to two bytes
        std::vector<char>{0, 0, 0, 0}}) {          // a frame of nothing
    std::thread server;
    TcpStore store("127.0.0.1", fakeStore(server, reply), "s", 5s);
    EXPECT_THROW(store.add("c", 1), InternalError);
    server.join();
  }
}

TEST(TcpStore, AnAddressNoSocketCanTakeIsAnInvalidArgument) {
  EXPECT_THROW(TcpStore("unix:/tmp/" + std::string(200, 'x'), 0, "s", 1s),
               InvalidArgumentError);
}

TEST(TcpStore, CountersRefuseWithCerarErrors) {
  using namespace store_framing;
  EXPECT_EQ(addCounter(parseCounter({'4', '1'}), 1), 42);
  EXPECT_THROW(parseCounter({'x'}), InvalidArgumentError);
  EXPECT_THROW(addCounter(INT64_MAX, 1), InvalidArgumentError);
}

}  // namespace
}  // namespace cerar
