// When a run posts its receives (ops/plan_run.cc, postInStep): on a free link the CPU bounds,
// a round's receives in its own step; anything else a step ahead. Only the timing may
// differ: every rank posts the same sends and the same receives, each in the same order, ends
// with the same bits, and a rank lost mid-pipeline fails every rank within the timeout,
// naming a round.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "common/error.h"
#include "ops/transport/forwarding.h"
#include "simulate.h"

namespace cerar {
namespace {

using testing::cerarOptions;
using testing::correlatedInputs;
using testing::onRanks;
using testing::ringOptions;

// 1024-byte segments both ways, receives a step ahead or in their round's step (the wires,
// which stream with the segments and window alone, a step ahead in both).
const Pacing kAhead{1024, 0, 0, false};
const Pacing kInStep{1024, 0, 0, true};

// Forwards to a transport; records the sends and, apart, the receives posted (peer, bytes),
// and the most receive bytes posted and not yet waited for.
class Recorder : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  void postSend(int peer, const void* data, size_t bytes) override {
    sends.emplace_back(peer, bytes);
    inner_->postSend(peer, data, bytes);
  }
  void postRecv(int peer, void* data, size_t bytes) override {
    receives.emplace_back(peer, bytes);
    pending_.push_back(bytes);
    posted_ += bytes;
    mostPosted = std::max(mostPosted, posted_);
    inner_->postRecv(peer, data, bytes);
  }
  void waitRecv(int peer) override {
    inner_->waitRecv(peer);
    posted_ -= pending_.front();
    pending_.erase(pending_.begin());
  }
  std::vector<std::pair<int, size_t>> sends, receives;
  size_t mostPosted = 0;

 private:
  std::vector<size_t> pending_;
  size_t posted_ = 0;
};

struct Outcome {
  std::vector<std::vector<float>> data;
  std::vector<std::vector<std::pair<int, size_t>>> sends, receives;
  std::vector<size_t> mostPosted;
  std::vector<RunStats> stats;
};

Outcome run(std::vector<std::vector<float>> data, const AllreduceOptions& options,
            const Pacing& pacing) {
  const int N = int(data.size());
  Outcome out;
  out.data = std::move(data);
  out.sends.resize(N);
  out.receives.resize(N);
  out.mostPosted.resize(N);
  out.stats.resize(N);
  onRanks(N, [&](int rank, std::unique_ptr<Transport> transport) {
    auto recorder = std::make_shared<Recorder>(std::move(transport));
    Communicator communicator(recorder, std::make_unique<Executor>(pacing));
    out.stats[rank] = communicator.allreduce(out.data[rank].data(), out.data[rank].size(),
                                             DType::kFloat32, options);
    out.sends[rank] = recorder->sends;
    out.receives[rank] = recorder->receives;
    out.mostPosted[rank] = recorder->mostPosted;
  });
  return out;
}

// CERAR as the runtime runs it, its in-band verdict riding on the run without a parameter
// agreement (`inBand`), or on the agreement.
AllreduceOptions cerar(int c, bool inBand) {
  AllreduceOptions o = cerarOptions(c, 1e-3);
  o.verifyParameters = !inBand;
  return o;
}

// The exact ring, CERAR with and without its in-band verdict (and one that stops on a NaN),
// the 16-bit and int8 wires; long and odd lengths, partial last segments.
TEST(ReceiveLead, SameTransfersInTheSameOrderAndTheSameBits) {
  for (int N : {2, 3, 4, 5, 8}) {
    std::vector<AllreduceOptions> runs = {ringOptions(), cerar(4 * N, false),
                                          cerar(4 * N, true)};
    for (Wire wire : {Wire::kFloat16, Wire::kInt8}) {
      runs.push_back(ringOptions());
      runs.back().wire = wire;
    }
    for (size_t r = 0; r < runs.size(); ++r) {
      for (size_t d : {size_t(20011), size_t(3 * N + 1)}) {
        auto inputs = correlatedInputs<float>(N, d, 13 * N + unsigned(d));
        const bool stops = r == 2 && d > 100;  // a NaN on one rank: every rank stops CERAR
        if (stops) inputs[N - 1][d / 2] = std::nanf("");
        const Outcome ahead = run(inputs, runs[r], kAhead);
        const Outcome inStep = run(inputs, runs[r], kInStep);
        for (int rank = 0; rank < N; ++rank) {
          const std::string where = "N=" + std::to_string(N) + " run " + std::to_string(r) +
                                    " d=" + std::to_string(d) + " rank " + std::to_string(rank);
          ASSERT_EQ(std::memcmp(ahead.data[rank].data(), inStep.data[rank].data(), d * 4), 0)
              << where;
          ASSERT_EQ(ahead.sends[rank], inStep.sends[rank]) << where;
          ASSERT_EQ(ahead.receives[rank], inStep.receives[rank]) << where;
          EXPECT_EQ(inStep.stats[rank].nonFiniteFallback, stops) << where;
          // Long runs but the wires' post in step: fewer receives wait posted.
          if (d > 100 && runs[r].wire == Wire::kNone) {
            EXPECT_LT(inStep.mostPosted[rank], ahead.mostPosted[rank]) << where;
          } else {
            EXPECT_EQ(inStep.mostPosted[rank], ahead.mostPosted[rank]) << where;
          }
        }
      }
    }
  }
}

// The exact ring of 20011 floats on 4 ranks: 5003-float shares in 1024-byte segments (five, the
// last partial). In step, at most one round's receives wait posted; a step ahead, two.
TEST(ReceiveLead, InStepAtMostOneRoundOfReceivesWaitsPosted) {
  auto inputs = correlatedInputs<float>(4, 20011, 3);
  const Outcome ahead = run(inputs, ringOptions(), kAhead);
  const Outcome inStep = run(inputs, ringOptions(), kInStep);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_LE(inStep.mostPosted[rank], 5003u * 4) << rank;
    EXPECT_GT(ahead.mostPosted[rank], 5003u * 4) << rank;
  }
}

// A transport whose rank dies (its hub's kill) at its wait number `dieAt`.
class DyingTransport : public ForwardingTransport {
 public:
  DyingTransport(std::unique_ptr<Transport> inner, InprocHub& hub, int dieAt)
      : ForwardingTransport(std::move(inner)), hub_(hub), dieAt_(dieAt) {}
  void waitSend(int peer) override {
    step();
    inner_->waitSend(peer);
  }
  void waitRecv(int peer) override {
    step();
    inner_->waitRecv(peer);
  }

 private:
  void step() {
    if (++waits_ != dieAt_) return;
    hub_.kill(inner_->rank());
    throw PeerLostError("rank " + std::to_string(inner_->rank()) + ": died", -1);
  }
  InprocHub& hub_;
  int dieAt_;
  int waits_ = 0;
};

// Rank 2 of 4 dies early, midway and late in an in-step run: every other rank fails with the
// hub's timeout, naming a round of the run, and none waits much longer.
TEST(ReceiveLead, ARankLostMidPipelineFailsEveryRankNamingARound) {
  constexpr int N = 4;
  for (int dieAt : {2, 17, 33}) {
    InprocHub hub(N, std::chrono::milliseconds(200));
    std::vector<std::string> errors(N);
    std::vector<std::thread> threads;
    const auto start = std::chrono::steady_clock::now();
    for (int rank = 0; rank < N; ++rank) {
      threads.emplace_back([&, rank] {
        std::vector<float> data(20011, 1.0f);
        std::unique_ptr<Transport> own = hub.connect(rank);
        std::shared_ptr<Transport> transport =
            rank == 2 ? std::make_shared<DyingTransport>(std::move(own), hub, dieAt)
                      : std::shared_ptr<Transport>(std::move(own));
        AllreduceOptions options = ringOptions();
        options.verifyParameters = false;  // the plan's waits only
        try {
          Communicator communicator(transport, std::make_unique<Executor>(kInStep));
          communicator.allreduce(data.data(), data.size(), DType::kFloat32, options);
        } catch (const Error& e) {
          errors[rank] = e.what();
        }
      });
    }
    for (auto& thread : threads) thread.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 3.0) << dieAt;
    for (int rank = 0; rank < N; ++rank) {
      EXPECT_NE(errors[rank].find(" in round "), std::string::npos)
          << "dies at " << dieAt << ", rank " << rank << ": " << errors[rank];
    }
  }
}

}  // namespace
}  // namespace cerar
