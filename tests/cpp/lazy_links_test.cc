// Gloo's links with per-pair store keys and links made on demand (ops/transport/lazy_links.h):
// every rank a thread of this process with its own store client and Gloo context.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <functional>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "ops/collectives.h"
#include "ops/transport/gloo_tcp.h"
#include "ops/transport/subset.h"
#include "rendezvous/tcp_store.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One rank's view of a job: its transport and the store bytes its start-up cost.
struct RankRun {
  std::unique_ptr<GlooTransport> transport;
  uint64_t startBytes = 0;
};

// Options of rank `rank` for the job; `eager` gives its start-up peers (empty: full mesh).
using OptionsOf = std::function<GlooOptions(int rank)>;
// What rank `rank` does once every rank has started; throws on failure.
using Body = std::function<void(int rank, GlooTransport& transport)>;

// Runs `size` ranks as threads: connect, a barrier, `body`, a barrier (so no rank closes its
// links while a peer still uses them). Returns each rank's failure message ("" for none) and
// fills `bytes` with each rank's start-up store traffic.
std::vector<std::string> runJob(int size, const OptionsOf& optionsOf, const Body& body,
                                std::vector<uint64_t>* bytes = nullptr) {
  TcpStoreServer server("127.0.0.1", 0, "lazy");
  server.start();
  std::vector<std::string> failures(size);
  if (bytes != nullptr) bytes->assign(size, 0);
  std::barrier started(size), finished(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      TcpStore store("127.0.0.1", server.port(), "lazy", 30s);
      std::unique_ptr<GlooTransport> transport;
      try {
        GlooOptions options = optionsOf(rank);
        options.storeHas = [&store](const std::string& key) { return store.check({key}); };
        const TcpStore::Traffic before = store.traffic();
        transport = connectGloo(store, rank, size, options);
        const TcpStore::Traffic after = store.traffic();
        if (bytes != nullptr) {
          (*bytes)[rank] = after.bytesSent + after.bytesReceived - before.bytesSent -
                           before.bytesReceived;
        }
      } catch (const std::exception& e) {
        failures[rank] = e.what();
      }
      started.arrive_and_wait();
      try {
        if (transport) body(rank, *transport);
      } catch (const std::exception& e) {
        failures[rank] = e.what();
      }
      finished.arrive_and_wait();
    });
  }
  for (std::thread& thread : threads) thread.join();
  return failures;
}

void expectNoFailures(const std::vector<std::string>& failures) {
  for (size_t rank = 0; rank < failures.size(); ++rank) {
    EXPECT_EQ(failures[rank], "") << "rank " << rank;
  }
}

GlooOptions lazyOptions(int rank, int size, int fanout, const std::string& key = {}) {
  GlooOptions options;
  options.timeout = 10s;
  options.prefix = "job";
  options.linkKey = key;
  options.eagerPeers = planPeers(rank, size, fanout);
  return options;
}

// The bytes rank `from` sends rank `to` in the all-to-all below.
std::vector<uint8_t> block(int from, int to, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = uint8_t(i * 7 + from * 31 + to * 101);
  return out;
}

void checkedAlltoall(Transport& t, size_t each) {
  const int n = t.size(), rank = t.rank();
  std::vector<uint8_t> send, recv(each * n);
  for (int to = 0; to < n; ++to) {
    const std::vector<uint8_t> b = block(rank, to, each);
    send.insert(send.end(), b.begin(), b.end());
  }
  const std::vector<size_t> sizes(n, each);
  pairwiseAlltoall(t, send.data(), sizes, recv.data(), sizes);
  for (int from = 0; from < n; ++from) {
    const std::vector<uint8_t> want = block(from, rank, each);
    if (!std::equal(want.begin(), want.end(), recv.begin() + from * each)) {
      throw Error(detail::concat("rank ", rank, ": wrong bytes from rank ", from));
    }
  }
}

TEST(LazyLinks, PlanPeersAreTheRingAndTheTreeAndMirrorEachOther) {
  EXPECT_EQ(planPeers(0, 8, 2), (std::vector<int>{1, 2, 7}));
  EXPECT_EQ(planPeers(3, 8, 2), (std::vector<int>{1, 2, 4, 7}));
  EXPECT_EQ(planPeers(0, 1, 8), std::vector<int>{});
  EXPECT_EQ(planPeers(1, 2, 8), std::vector<int>{0});
  for (int size : {2, 3, 8, 33, 100}) {
    for (int fanout : {1, 2, 8}) {
      for (int p = 0; p < size; ++p) {
        for (int q : planPeers(p, size, fanout)) {
          const std::vector<int> back = planPeers(q, size, fanout);
          EXPECT_TRUE(std::count(back.begin(), back.end(), p) == 1)
              << p << " and " << q << " of " << size << ", fanout " << fanout;
        }
      }
    }
  }
}

// Each pair's address under a key of its own: a rank reads N-1 addresses, not (N-1)^2.
TEST(LazyLinks, StoreBytesPerRankGrowLinearlyWithTheJob) {
  std::vector<double> perPeer;
  for (int size : {4, 8, 16, 32}) {
    std::vector<uint64_t> bytes;
    const auto failures = runJob(
        size,
        [](int) {
          GlooOptions options;
          options.timeout = 20s;
          options.startLimit = 5s;  // 32 ranks' threads on few cores
          return options;
        },
        [](int, GlooTransport& t) {
          if (t.linksConnected() != t.size() - 1) throw Error("not a full mesh");
        },
        &bytes);
    expectNoFailures(failures);
    const uint64_t most = *std::max_element(bytes.begin(), bytes.end());
    std::printf("full mesh of %d ranks: at most %llu store bytes per rank\n", size,
                static_cast<unsigned long long>(most));
    perPeer.push_back(double(most) / (size - 1));
  }
  // Linear in N: the bytes per peer stay within 2x of the smallest job's.
  for (double each : perPeer) EXPECT_LE(each, 2 * perPeer.front());
}

// With the job's fanout of 8, a rank's links at start stay at most 11 (two neighbours, a parent
// and 8 children) whatever N, and its store bytes shrink with them.
TEST(LazyLinks, LinksAtStartAreBoundedByTheTree) {
  for (int size : {4, 8, 16, 32}) {
    std::vector<uint64_t> bytes;
    std::mutex mutex;
    std::vector<int> links(size);
    const auto failures = runJob(
        size,
        [size](int rank) {
          GlooOptions options = lazyOptions(rank, size, 8);
          options.startLimit = 5s;
          return options;
        },
        [&](int rank, GlooTransport& t) {
          std::lock_guard<std::mutex> lock(mutex);
          links[rank] = t.linksConnected();
        },
        &bytes);
    expectNoFailures(failures);
    const auto [fewest, most] = std::minmax_element(links.begin(), links.end());
    std::printf("links made on demand, %d ranks: %d to %d links per rank at start (full mesh: "
                "%d), at most %llu store bytes per rank\n",
                size, *fewest, *most, size - 1,
                static_cast<unsigned long long>(*std::max_element(bytes.begin(), bytes.end())));
    EXPECT_LE(*most, 11);
    for (int rank = 0; rank < size; ++rank) {
      EXPECT_EQ(links[rank], int(planPeers(rank, size, 8).size())) << "rank " << rank;
    }
  }
}

TEST(LazyLinks, OnlyRingAndTreeLinksAtStartAnAlltoallMakesTheRest) {
  constexpr int kSize = 8, kFanout = 2;
  std::mutex mutex;
  std::vector<int> atStart(kSize), afterAlltoall(kSize);
  const auto failures = runJob(
      kSize, [](int rank) { return lazyOptions(rank, kSize, kFanout); },
      [&](int rank, GlooTransport& t) {
        const int before = t.linksConnected();
        checkedAlltoall(t, 1000 + 3);
        checkedAlltoall(t, 70000);  // again, over the links made by the first
        std::lock_guard<std::mutex> lock(mutex);
        atStart[rank] = before;
        afterAlltoall[rank] = t.linksConnected();
      });
  expectNoFailures(failures);
  for (int rank = 0; rank < kSize; ++rank) {
    EXPECT_EQ(atStart[rank], int(planPeers(rank, kSize, kFanout).size())) << "rank " << rank;
    EXPECT_LT(atStart[rank], kSize - 1) << "rank " << rank;
    EXPECT_EQ(afterAlltoall[rank], kSize - 1) << "rank " << rank;
  }
}

TEST(LazyLinks, AProcessSetRingFirstUsedLaterMakesItsLinks) {
  constexpr int kSize = 8, kFanout = 2;
  const std::vector<int> members = {0, 3, 6};  // no two of them linked at start
  std::mutex mutex;
  std::vector<int> before(kSize), after(kSize);
  const auto failures = runJob(
      kSize, [](int rank) { return lazyOptions(rank, kSize, kFanout, "job key"); },
      [&](int rank, GlooTransport& t) {
        const int start = t.linksConnected();
        if (std::count(members.begin(), members.end(), rank) == 1) {
          SubsetTransport set(t.channel(5), members);
          std::vector<uint8_t> out = block(set.rank(), 0, 4096), in(4096);
          set.postRecv(set.prev(), in.data(), in.size());
          set.postSend(set.next(), out.data(), out.size());
          set.waitRecv(set.prev());
          set.waitSend(set.next());
          if (in != block(set.prev(), 0, 4096)) throw Error("wrong bytes in the set's ring");
        }
        std::lock_guard<std::mutex> lock(mutex);
        before[rank] = start;
        after[rank] = t.linksConnected();
      });
  expectNoFailures(failures);
  for (int rank = 0; rank < kSize; ++rank) {
    const bool member = std::count(members.begin(), members.end(), rank) == 1;
    EXPECT_EQ(after[rank] - before[rank], member ? 2 : 0) << "rank " << rank;
  }
}

TEST(LazyLinks, APeerThatNeverComesFailsNamingItWithinTheTimeout) {
  constexpr int kSize = 4;
  const auto failures = runJob(
      kSize,
      [](int rank) {
        GlooOptions options = lazyOptions(rank, kSize, 1);  // ranks 0 and 2 not linked
        options.timeout = 1500ms;
        return options;
      },
      [](int rank, GlooTransport& t) {
        if (rank != 0) return;
        std::vector<uint8_t> in(64);
        const auto start = Clock::now();
        t.postRecv(2, in.data(), in.size());
        try {
          t.waitRecv(2);
        } catch (const Error& e) {
          const auto took = Clock::now() - start;
          if (took > 1500ms + 2s) throw Error("the failure came late");
          throw;
        }
      });
  EXPECT_NE(failures[0].find("link to rank 2"), std::string::npos) << failures[0];
  EXPECT_NE(failures[0].find("did not come"), std::string::npos) << failures[0];
  for (int rank = 1; rank < kSize; ++rank) EXPECT_EQ(failures[rank], "") << "rank " << rank;
}

// Links (0,1) and (2,3) at start; (0,2) on demand, where the two ends hold `key0` and `key2`.
std::vector<std::string> linkZeroAndTwo(const std::string& key0, const std::string& key2) {
  return runJob(
      4,
      [&](int rank) {
        GlooOptions options;
        options.timeout = 5s;
        options.prefix = "job";
        options.linkKey = rank < 2 ? key0 : key2;
        options.eagerPeers = {rank ^ 1};
        return options;
      },
      [](int rank, GlooTransport& t) {
        if (rank != 0 && rank != 2) return;
        const int peer = 2 - rank;
        std::vector<uint8_t> out = block(rank, peer, 512), in(512);
        t.postRecv(peer, in.data(), in.size());
        t.postSend(peer, out.data(), out.size());
        t.waitRecv(peer);
        t.waitSend(peer);
        if (in != block(peer, rank, 512)) throw Error("wrong bytes");
        if (t.linksConnected() != 2) throw Error("expected 2 links");
      });
}

TEST(LazyLinks, ALinkMadeOnDemandProvesTheJobKey) {
  expectNoFailures(linkZeroAndTwo("the key", "the key"));
  const auto failures = linkZeroAndTwo("the key", "another key");
  for (int rank : {0, 2}) {
    EXPECT_NE(failures[rank].find("not this job's"), std::string::npos)
        << "rank " << rank << ": " << failures[rank];
  }
}

}  // namespace
}  // namespace cerar
