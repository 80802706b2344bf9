// The send window (ops/paced_link.h): it changes when transfers are posted, never a result,
// never deadlocks, and keeps what is in flight to the next rank within the window.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <utility>

#include "ops/paced_link.h"
#include "ops/transport/forwarding.h"
#include "simulate.h"

namespace cerar {
namespace {

using testing::correlatedInputs;
using testing::simulatePaced;

AllreduceOptions options(Algorithm algorithm, int c, bool exactOnNonFinite = true) {
  AllreduceOptions o;
  o.algorithm = algorithm;
  o.components = c;
  o.eps = algorithm == Algorithm::kCerar ? 1e-3 : 0;
  o.exactOnNonFinite = exactOnNonFinite;
  return o;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Tiny windows (one byte: every send waits for what arrived) and small segments (many per
// round): the ring, CERAR with its in-band verdict and without, and the 16-bit wires.
TEST(PacedLink, WindowsChangeNoBitAndNeverDeadlock) {
  for (int N : {2, 3, 5, 8}) {
    std::vector<AllreduceOptions> runs = {
        options(Algorithm::kRing, 0), options(Algorithm::kCerar, 4 * N),
        options(Algorithm::kCerar, 3 * N, false)};
    for (Wire wire : {Wire::kFloat16, Wire::kBFloat16}) {
      runs.push_back(options(Algorithm::kRing, 0));
      runs.back().wire = wire;
    }
    for (const auto& run : runs) {
      auto reference = correlatedInputs<float>(N, 3001, 11 * N);
      const auto inputs = reference;
      simulatePaced(reference, run, Pacing{});
      for (const Pacing pacing : {Pacing{64, 1}, Pacing{256, 700}, Pacing{1024, 4096}}) {
        auto paced = inputs;
        simulatePaced(paced, run, pacing);
        for (int rank = 0; rank < N; ++rank)
          ASSERT_TRUE(sameBits(paced[rank], reference[rank]))
              << "N=" << N << " segment " << pacing.segmentBytes << " window "
              << pacing.windowBytes << " rank " << rank;
      }
    }
  }
}

// Forwards to a transport and checks, at every send to next, that while some sent bytes are
// unanswered, sent + this send - arrived stays within `bound`.
class InFlightCheck : public ForwardingTransport {
 public:
  InFlightCheck(std::unique_ptr<Transport> inner, size_t bound)
      : ForwardingTransport(std::move(inner)), bound_(bound) {}
  void postSend(int peer, const void* data, size_t bytes) override {
    if (arrived_ < sent_ && sent_ + bytes > arrived_ + bound_) ++overruns;
    ++sends;
    sent_ += bytes;
    inner_->postSend(peer, data, bytes);
  }
  void postRecv(int peer, void* data, size_t bytes) override {
    receives_.push_back(bytes);
    inner_->postRecv(peer, data, bytes);
  }
  void waitRecv(int peer) override {
    inner_->waitRecv(peer);
    arrived_ += receives_.front();
    receives_.pop_front();
  }
  int overruns = 0;
  int sends = 0;

 private:
  size_t bound_;
  size_t sent_ = 0, arrived_ = 0;
  std::deque<size_t> receives_;
};

// Per rank: sends that overran a 2 KiB bound, and sends, for one all-reduce of `d` floats on
// 4 ranks.
std::vector<std::pair<int, int>> checked(const Pacing& pacing, const AllreduceOptions& run,
                                         size_t d = 20000) {
  constexpr int N = 4;
  InprocHub hub(N, std::chrono::seconds(20));
  auto buffers = correlatedInputs<float>(N, d, 5);
  std::vector<std::pair<int, int>> result(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      auto check = std::make_shared<InFlightCheck>(hub.connect(rank), 2048);
      Communicator communicator(check, std::make_unique<Executor>(pacing));
      communicator.allreduce(buffers[rank].data(), buffers[rank].size(), DType::kFloat32, run);
      result[rank] = {check->overruns, check->sends};
    });
  }
  for (auto& thread : threads) thread.join();
  return result;
}

// Overruns of a 2 KiB bound per rank, CERAR on 4 ranks in 512-byte segments.
std::vector<int> overruns(const Pacing& pacing) {
  std::vector<int> counts;
  for (const auto& [overran, sends] : checked(pacing, options(Algorithm::kCerar, 16)))
    counts.push_back(overran);
  return counts;
}

TEST(PacedLink, KeepsWithinTheWindow) {
  for (int count : overruns(Pacing{512, 0})) EXPECT_GT(count, 0);  // the check can fail
  for (int count : overruns(Pacing{512, 2048})) EXPECT_EQ(count, 0);
}

// Without a window, long shares go in longer segments (up to longSegmentBytes, half a share at
// least): fewer sends, the same bits on every rank, odd sizes included.
TEST(PacedLink, LongSegmentsChangeNoBit) {
  for (int N : {2, 3, 5, 8}) {
    std::vector<AllreduceOptions> runs = {options(Algorithm::kRing, 0),
                                          options(Algorithm::kCerar, 4 * N)};
    runs.push_back(options(Algorithm::kRing, 0));
    runs.back().wire = Wire::kFloat16;
    for (const auto& run : runs) {
      for (size_t d : {size_t(20011), size_t(3 * N + 1)}) {
        auto fixed = correlatedInputs<float>(N, d, 7 * N);
        auto grown = fixed;
        simulatePaced(fixed, run, Pacing{64, 0});
        simulatePaced(grown, run, Pacing{64, 0, 1024});
        for (int rank = 0; rank < N; ++rank)
          ASSERT_TRUE(sameBits(grown[rank], fixed[rank])) << "N=" << N << " d=" << d;
      }
    }
  }
  // 20000 floats on 4 ranks: 20000-byte shares, cut in 1024-byte segments where 64 were asked
  // for: 20 per round instead of 313, over 6 rounds (beside the run's other sends).
  const auto fixed = checked(Pacing{64, 0}, options(Algorithm::kRing, 0));
  const auto grown = checked(Pacing{64, 0, 1024}, options(Algorithm::kRing, 0));
  const auto windowed = checked(Pacing{64, 4096, 1024}, options(Algorithm::kRing, 0));
  for (int rank = 0; rank < 4; ++rank) {
    const int others = fixed[rank].second - 6 * 313;
    EXPECT_GE(others, 0) << rank;
    EXPECT_EQ(grown[rank].second, others + 6 * 20) << rank;
    EXPECT_EQ(windowed[rank].second, fixed[rank].second) << rank;  // a window keeps its own
  }
  // Segments of up to 1 MiB: a 20000-byte share goes in two, one reduced while the other
  // travels.
  const auto halves = checked(Pacing{64, 0, size_t(1) << 20}, options(Algorithm::kRing, 0));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(halves[rank].second, fixed[rank].second - 6 * 313 + 6 * 2) << rank;
  }
}

TEST(PacedLink, PacingForAWindowHalvesIt) {
  EXPECT_EQ(pacingFor(0).windowBytes, 0u);
  EXPECT_EQ(pacingFor(0).segmentBytes, Executor::kDefaultSegmentBytes);
  EXPECT_EQ(pacingFor(64 << 10).segmentBytes, size_t(32 << 10));
  EXPECT_EQ(pacingFor(64 << 10).windowBytes, size_t(64 << 10));
  EXPECT_EQ(pacingFor(0).longSegmentBytes, size_t(1) << 20);
  EXPECT_EQ(pacingFor(64 << 10).longSegmentBytes, 0u);
  EXPECT_FALSE(pacingFor(0).receivesInStep);
  EXPECT_TRUE(pacingFor(0, true).receivesInStep);
  EXPECT_FALSE(pacingFor(64 << 10, true).receivesInStep);  // a window keeps receives ahead
}

}  // namespace
}  // namespace cerar
