// How long a link made on demand waits (ops/transport/lazy_links.h): for its peer, the job's
// timeout from the latest post or wait on it; in its proof, the job's timeout, cut short when
// its transport goes. Three ranks as threads of this process: links (0,1) and (1,2) at start,
// (0,2) on demand.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gloo/transport/tcp/address.h>

#include "common/error.h"
#include "ops/transport/gloo_tcp.h"
#include "rendezvous/tcp_store.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kSize = 3;

// What rank `rank` does once every rank has started; it may drop the transport. Throws on
// failure.
using Body = std::function<void(int rank, std::unique_ptr<GlooTransport>& transport,
                                TcpStore& store)>;

// Runs the three ranks with `timeout` and the job key; returns each rank's failure ("": none).
std::vector<std::string> runJob(std::chrono::milliseconds timeout, const Body& body) {
  TcpStoreServer server("127.0.0.1", 0, "waits");
  server.start();
  std::vector<std::string> failures(kSize);
  std::barrier started(kSize), finished(kSize);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kSize; ++rank) {
    threads.emplace_back([&, rank] {
      TcpStore store("127.0.0.1", server.port(), "waits", 30s);
      std::unique_ptr<GlooTransport> transport;
      try {
        GlooOptions options;
        options.timeout = timeout;
        options.prefix = "job";
        options.linkKey = "the key";
        options.eagerPeers = rank == 1 ? std::vector<int>{0, 2} : std::vector<int>{1};
        options.storeHas = [&store](const std::string& key) { return store.check({key}); };
        transport = connectGloo(store, rank, kSize, options);
      } catch (const std::exception& e) {
        failures[rank] = e.what();
      }
      started.arrive_and_wait();
      try {
        if (transport) body(rank, transport, store);
      } catch (const std::exception& e) {
        failures[rank] = e.what();
      }
      finished.arrive_and_wait();
    });
  }
  for (std::thread& thread : threads) thread.join();
  return failures;
}

TEST(LazyLinksWaits, APeerHasTheTimeoutFromTheLatestWaitOnTheLink) {
  // Rank 0 posts at once but waits only after 2 s; rank 2 comes after 4 s, past the timeout
  // from the post (3 s), within the timeout from the wait (5 s).
  const auto failures = runJob(3s, [](int rank, std::unique_ptr<GlooTransport>& t, TcpStore&) {
    if (rank == 1) return;
    const int peer = 2 - rank;
    std::vector<uint8_t> out(64, uint8_t(rank)), in(64);
    if (rank == 2) std::this_thread::sleep_for(4s);
    t->postRecv(peer, in.data(), in.size());
    t->postSend(peer, out.data(), out.size());
    if (rank == 0) std::this_thread::sleep_for(2s);
    t->waitRecv(peer);
    t->waitSend(peer);
    if (in != std::vector<uint8_t>(64, uint8_t(peer))) throw Error("wrong bytes");
  });
  for (int rank = 0; rank < kSize; ++rank) EXPECT_EQ(failures[rank], "") << "rank " << rank;
}

// A connection that is not rank 2's takes rank 2's end of the link (0,2): it listens under
// rank 2's key and also connects to rank 0's end (whichever end Gloo has connect), then stays
// silent. Returns once `done` or 20 s.
void silentStranger(TcpStore& store, const std::function<bool()>& done) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof in;
  if (bind(listener, reinterpret_cast<sockaddr*>(&in), length) != 0 || listen(listener, 4) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&in), &length) != 0) {
    throw Error("the stranger cannot listen");
  }
  sockaddr_storage mine{};
  std::memcpy(&mine, &in, sizeof in);
  store.set(pairKey("job", 2, 0), gloo::transport::tcp::Address(mine, 1).bytes());
  store.wait({pairKey("job", 0, 2)}, 10s);
  const gloo::transport::tcp::Address theirs(store.get(pairKey("job", 0, 2)));
  const int out = socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_storage& to = theirs.getSockaddr();
  if (connect(out, reinterpret_cast<const sockaddr*>(&to), sizeof(sockaddr_in)) == 0) {
    const auto seq = theirs.getSeq();  // what Gloo's connecting end sends first
    (void)!write(out, &seq, sizeof seq);
  }
  std::vector<int> accepted;
  for (const auto end = Clock::now() + 20s; !done() && Clock::now() < end;) {
    pollfd ready{listener, POLLIN, 0};
    if (poll(&ready, 1, 50) == 1) accepted.push_back(accept(listener, nullptr, nullptr));
  }
  for (int fd : accepted) close(fd);
  close(out);
  close(listener);
}

TEST(LazyLinksWaits, DroppingTheTransportEndsAProofThatWaitsTheTimeout) {
  std::atomic<bool> dropped{false};
  std::string stranger;
  const auto failures = runJob(20s, [&](int rank, std::unique_ptr<GlooTransport>& t,
                                        TcpStore& store) {
    if (rank == 2) {
      try {
        silentStranger(store, [&] { return dropped.load(); });
      } catch (const std::exception& e) {
        stranger = e.what();
      }
      return;
    }
    if (rank != 0) return;
    std::vector<uint8_t> in(64);
    t->postRecv(2, in.data(), in.size());
    std::this_thread::sleep_for(1500ms);  // connected to the stranger, its proof waiting
    const auto start = Clock::now();
    t.reset();
    dropped = true;
    const auto took = Clock::now() - start;
    if (took > 2s) {
      throw Error(detail::concat("dropping took ",
                                 std::chrono::duration_cast<std::chrono::milliseconds>(took)
                                     .count(), " ms"));
    }
  });
  EXPECT_EQ(stranger, "");
  for (int rank = 0; rank < kSize; ++rank) EXPECT_EQ(failures[rank], "") << "rank " << rank;
}

}  // namespace
}  // namespace cerar
