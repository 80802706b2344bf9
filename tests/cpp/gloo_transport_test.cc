// The Gloo TCP transport, with every rank a forked process on loopback (through runLocalJob).
#include <unistd.h>

#include <cstring>
#include <gloo/context.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "ops/communicator.h"
#include "ops/transport/gloo_tcp.h"
#include "tools/local_job.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Bytes that depend on the sender, the transfer and the position, so that a misrouted,
// reordered or truncated transfer shows.
std::vector<uint8_t> pattern(int sender, int transfer, size_t bytes) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    data[i] = static_cast<uint8_t>(i * 131 + static_cast<size_t>(sender) * 17 + transfer * 29 +
                                   (i >> 12));
  }
  return data;
}

// Posts every size at once (receive from prev, send to next), then waits in order.
void ringExchange(Transport& t, const std::vector<size_t>& sizes, int round) {
  std::vector<std::vector<uint8_t>> out, in;
  for (size_t k = 0; k < sizes.size(); ++k) {
    out.push_back(pattern(t.rank(), round * 100 + static_cast<int>(k), sizes[k]));
    in.emplace_back(sizes[k]);
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    t.postRecv(t.prev(), in[k].data(), sizes[k]);
    t.postSend(t.next(), out[k].data(), sizes[k]);
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    t.waitRecv(t.prev());
    t.waitSend(t.next());
    if (in[k] != pattern(t.prev(), round * 100 + static_cast<int>(k), sizes[k])) {
      throw Error(detail::concat("rank ", t.rank(), ": wrong bytes in transfer ", k, " of ",
                                 sizes[k], " bytes from rank ", t.prev()));
    }
  }
}

TEST(GlooTransport, RingOfFourExchangesSeveralSizes) {
  LocalJobOptions options{4, LocalTransport::kGloo, 10s};
  auto results = runLocalJob(options, [](int rank, std::shared_ptr<Transport> t) {
    if (t->rank() != rank || t->size() != 4 || t->timeout() != 10s) throw Error("bad identity");
    const std::vector<size_t> sizes = {1, 1000, 65536 + 3, 4 << 20};
    for (int round = 0; round < 3; ++round) ringExchange(*t, sizes, round);
    return detail::concat("ok ", rank);
  });
  ASSERT_EQ(results.size(), 4u);
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(results[rank], detail::concat("ok ", rank));
}

TEST(GlooTransport, TwoRanksFullDuplexAndRejectedPosts) {
  LocalJobOptions options{2, LocalTransport::kGloo, 10s};
  auto results = runLocalJob(options, [](int, std::shared_ptr<Transport> t) {
    ringExchange(*t, {4 << 20, 17, 4 << 20}, 0);  // next == prev: both directions at once
    auto* gloo = dynamic_cast<GlooTransport*>(t.get());
    if (gloo == nullptr || gloo->context()->size != 2) throw Error("no Gloo context");
    char byte = 0;
    std::string rejected;
    try {
      t->postSend(t->next(), &byte, 0);
    } catch (const Error&) {
      rejected += "zero;";
    }
    try {
      t->postSend(t->rank(), &byte, 1);
    } catch (const Error&) {
      rejected += "self;";
    }
    ringExchange(*t, {1 << 20}, 1);  // rejected posts leave the transport usable
    return rejected;
  });
  EXPECT_EQ(results, (std::vector<std::string>{"zero;self;", "zero;self;"}));
}

// Transfers inside registered regions go by offset through the region's one buffer, in posting
// order, mixed with transfers outside any region; an overlapping region is refused.
TEST(GlooTransport, RegisteredRegionsTransferByOffsetInOrder) {
  LocalJobOptions options{3, LocalTransport::kGloo, 10s};
  auto results = runLocalJob(options, [](int, std::shared_ptr<Transport> t) {
    auto& gloo = dynamic_cast<GlooTransport&>(*t);
    constexpr size_t kSegment = 5000, kSegments = 7;
    const auto out = pattern(t->rank(), 1, kSegment * kSegments);
    std::vector<uint8_t> in(out.size()), loose(999), looseIn(999);
    std::vector<uint8_t> sendCopy = out;
    if (!t->registerMemory(sendCopy.data(), sendCopy.size()) ||
        !t->registerMemory(in.data(), in.size()))
      throw Error("registration refused");
    if (t->registerMemory(in.data() + 10, 100)) throw Error("an overlapping region was taken");
    const uint64_t before = gloo.buffersCreated();
    for (size_t k = 0; k < kSegments; ++k) {
      t->postRecv(t->prev(), in.data() + k * kSegment, kSegment);
      t->postSend(t->next(), sendCopy.data() + k * kSegment, kSegment);
      if (k == 3) {  // outside every region: a buffer of its own, queued between the others
        t->postRecv(t->prev(), looseIn.data(), looseIn.size());
        t->postSend(t->next(), loose.data(), loose.size());
      }
    }
    for (size_t k = 0; k < kSegments + 1; ++k) {
      t->waitRecv(t->prev());
      t->waitSend(t->next());
    }
    if (gloo.buffersCreated() != before + 2) throw Error("segments did not use the regions");
    if (in != pattern(t->prev(), 1, in.size())) throw Error("wrong bytes in the region");
    if (looseIn != loose) throw Error("wrong bytes outside the regions");
    t->releaseMemory(sendCopy.data());
    t->releaseMemory(in.data());
    ringExchange(*t, {4096}, 2);  // released: the per-transfer path again
    return std::string("ok");
  });
  for (const auto& result : results) EXPECT_EQ(result, "ok");
}

// A run registers its buffers once: hundreds of segments, a handful of buffers, and the ring's
// exact integer sums.
TEST(GlooTransport, RunsRegisterTheirBuffersOnce) {
  LocalJobOptions options{4, LocalTransport::kGloo, 10s};
  auto results = runLocalJob(options, [](int rank, std::shared_ptr<Transport> t) {
    auto& gloo = dynamic_cast<GlooTransport&>(*t);
    Communicator communicator(t, 4096);  // 1 MiB in segments of 4 KiB
    std::vector<std::string> created;
    for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kCerar}) {
      std::vector<float> data(1 << 18);
      for (size_t i = 0; i < data.size(); ++i) data[i] = float((i + size_t(rank)) % 7);
      AllreduceOptions run;
      run.algorithm = algorithm;
      run.components = 16;
      const uint64_t before = gloo.buffersCreated();
      communicator.allreduce(data.data(), data.size(), DType::kFloat32, run);
      created.push_back(std::to_string(gloo.buffersCreated() - before));
      if (algorithm != Algorithm::kRing) continue;
      for (size_t i = 0; i < data.size(); ++i) {
        float sum = 0;
        for (int r = 0; r < 4; ++r) sum += float((i + size_t(r)) % 7);
        if (data[i] != sum) throw Error(detail::concat("element ", i, ": ", data[i]));
      }
    }
    return created[0] + " " + created[1];
  });
  // The data and four message buffers, plus at most a few small transfers (parameter checks).
  for (const auto& result : results) {
    const auto space = result.find(' ');
    EXPECT_LE(std::stoi(result.substr(0, space)), 12) << result;
    EXPECT_LE(std::stoi(result.substr(space + 1)), 12) << result;
  }
}

TEST(GlooTransport, DeadPeerFailsTheNeighbourWithinTheTimeout) {
  LocalJobOptions options{4, LocalTransport::kGloo, 2000ms};
  options.failureGrace = 5s;  // let the survivors report what they saw
  const auto start = Clock::now();
  try {
    runLocalJob(options, [](int rank, std::shared_ptr<Transport> t) -> std::string {
      // Buffers first, then a small exchange, so that every rank posts at about the same time.
      const size_t bytes = 16 << 20;
      std::vector<uint8_t> in(bytes), out(bytes, static_cast<uint8_t>(rank));
      ringExchange(*t, {1000}, 0);
      const auto waitStart = Clock::now();
      try {
        t->postRecv(t->prev(), in.data(), bytes);
        t->postSend(t->next(), out.data(), bytes);
        if (rank == 1) {
          usleep(2000);
          _exit(0);  // dies without a word in the middle of a transfer, links and all
        }
        t->waitRecv(t->prev());
        t->waitSend(t->next());
        ringExchange(*t, {1000}, 1);
      } catch (const Error& e) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() -
                                                                        waitStart);
        std::string later = "still usable";
        char scratch = 0;
        try {
          t->postRecv(t->prev(), &scratch, 1);
        } catch (const Error& again) {
          later = std::strstr(again.what(), "unusable") ? "unusable" : again.what();
        }
        throw Error(detail::concat(e.what(), " {after ", ms.count(), " ms; then ", later, "}"));
      }
      return "survived";
    });
    FAIL() << "a dead peer went unnoticed";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 1: exited with code 0 without a result"), std::string::npos)
        << what;
    // Rank 2 receives from the dead rank 1.
    auto at = what.find("rank 2: ");
    ASSERT_NE(at, std::string::npos) << what;
    const std::string rank2 = what.substr(at, what.find("}", at) - at);
    EXPECT_NE(rank2.find("from rank 1"), std::string::npos) << rank2;
    EXPECT_NE(rank2.find("then unusable"), std::string::npos) << rank2;
    auto msAt = rank2.find("{after ");
    ASSERT_NE(msAt, std::string::npos) << rank2;
    EXPECT_LE(std::stol(rank2.substr(msAt + 7)), 2000 + 1000) << rank2;
  }
  EXPECT_LT(Clock::now() - start, 9s);
}

}  // namespace
}  // namespace cerar
