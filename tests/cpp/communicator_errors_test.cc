// Bad input gets a clear error on every rank, never a hang: parameters, disagreeing ranks, a
// rank killed in the middle of an all-reduce (over Gloo TCP, real processes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>

#include "common/error.h"
#include "simulate.h"
#include "tools/allreduce_job.h"
#include "tools/local_job.h"

namespace cerar {
namespace {

using testing::simulate;

std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every "in round t of L" in `message` has 1 <= t <= L (never "round L+1 of L").
int checkRounds(const std::string& message) {
  int found = 0;
  for (size_t at = message.find("in round "); at != std::string::npos;
       at = message.find("in round ", at + 1)) {
    int t = 0, L = 0;
    EXPECT_EQ(std::sscanf(message.c_str() + at, "in round %d of %d", &t, &L), 2) << message;
    EXPECT_TRUE(t >= 1 && t <= L) << message.substr(at, 24);
    ++found;
  }
  return found;
}

AllreduceOptions cerarWith(int c, double eps) {
  AllreduceOptions options;
  options.components = c;
  options.eps = eps;
  return options;
}

TEST(CommunicatorErrors, BadParametersAreRejected) {
  std::vector<std::vector<float>> buffers(4, std::vector<float>(100, 1.0f));
  EXPECT_NE(errorOf([&] { simulate(buffers, cerarWith(6, 1e-3)); }).find("multiple of N=4"),
            std::string::npos);
  for (double eps : {0.0 - 1e-3, std::nan(""), std::numeric_limits<double>::infinity()}) {
    EXPECT_NE(errorOf([&] { simulate(buffers, cerarWith(8, eps)); }).find("eps must be positive"),
              std::string::npos)
        << eps;
  }
  std::vector<std::vector<int32_t>> ints(4, std::vector<int32_t>(10, 1));
  EXPECT_NE(errorOf([&] { simulate(ints, cerarWith(8, 1e-3), 1024, DType::kInt32); })
                .find("CERAR supports f32 and f64"),
            std::string::npos);
  AllreduceOptions minimum = cerarWith(8, 1e-3);
  minimum.op = ReduceOp::kMin;
  EXPECT_NE(errorOf([&] { simulate(buffers, minimum); }).find("needs the exact ring"),
            std::string::npos);
  EXPECT_THROW(parseDType("f8"), InvalidArgumentError);
  EXPECT_THROW(simulate(buffers, cerarWith(6, 1e-3)), InvalidArgumentError);
}

// Ranks that disagree on d, c or eps all fail, each naming both values.
TEST(CommunicatorErrors, DisagreeingRanksFailEverywhere) {
  struct Variant {
    const char* what;
    size_t d;
    int c;
    double eps;
  };
  for (Variant variant : {Variant{"d=", 101, 8, 1e-3}, Variant{"c=", 100, 12, 1e-3},
                          Variant{"eps=", 100, 8, 2e-3}}) {
    const int N = 4;
    InprocHub hub(N, std::chrono::seconds(5));
    std::vector<std::string> errors(N);
    std::vector<int> peers(N, -1);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < N; ++rank) {
      threads.emplace_back([&, rank] {
        const bool odd = rank == 2;
        std::vector<float> data(odd ? variant.d : 100, 1.0f);
        Communicator communicator(hub.connect(rank));
        try {
          communicator.allreduce(data.data(), data.size(), DType::kFloat32,
                                 cerarWith(odd ? variant.c : 8, odd ? variant.eps : 1e-3));
        } catch (const MismatchError& e) {
          errors[rank] = e.what();
          peers[rank] = e.peer();
        }
      });
    }
    for (auto& thread : threads) thread.join();
    for (int rank = 0; rank < N; ++rank) {
      EXPECT_NE(errors[rank].find("parameters disagree"), std::string::npos) << errors[rank];
      EXPECT_NE(errors[rank].find("rank 2 has"), std::string::npos) << errors[rank];
      EXPECT_NE(errors[rank].find(variant.what), std::string::npos) << errors[rank];
      EXPECT_EQ(peers[rank], 2) << errors[rank];
    }
  }
}

// Gloo TCP across 4 processes gives the same bits as the in-process transport.
TEST(CommunicatorGloo, BitIdenticalToInproc) {
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kCerar}) {
    AllreduceJob job;
    job.np = 4;
    job.algorithm = algorithm;
    job.components = 12;
    job.eps = 1e-3;
    job.elements = 300007;
    job.seed = 11;
    job.segmentBytes = 64 * 1024;
    std::vector<std::string> outputs;
    for (LocalTransport transport : {LocalTransport::kInproc, LocalTransport::kGloo}) {
      job.transport = transport;
      job.outDir = ::testing::TempDir() + "/cerar_bits_" + std::to_string(int(transport));
      ASSERT_EQ(system(("mkdir -p " + job.outDir).c_str()), 0);
      const AllreduceJobResult result = runAllreduceJob(job);
      EXPECT_EQ(result.rounds, algorithm == Algorithm::kRing ? 6 : 14);
      outputs.push_back(job.outDir);
    }
    for (int rank = 0; rank < 4; ++rank) {
      const std::string name = "/rank" + std::to_string(rank) + ".out";
      EXPECT_EQ(system(("cmp -s " + outputs[0] + name + " " + outputs[1] + name).c_str()), 0)
          << algorithmName(algorithm) << " rank " << rank;
    }
  }
}

// A rank dies in the middle: every other rank fails within the timeout, naming the peer it
// waited on.
TEST(CommunicatorGloo, KilledRankMakesEveryOtherRankFailInTime) {
  LocalJobOptions options;
  options.size = 4;
  options.transport = LocalTransport::kGloo;
  options.timeout = std::chrono::milliseconds(2000);
  options.failureGrace = std::chrono::milliseconds(8000);
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    runLocalJob(options, [](int rank, std::shared_ptr<Transport> transport) -> std::string {
      std::vector<float> data(size_t(8) << 20, 1.0f);
      Communicator communicator(std::move(transport), 64 * 1024);
      AllreduceOptions cerar;
      cerar.components = 64;
      if (rank == 2) {
        std::thread([] {
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          _exit(9);
        }).detach();
      }
      for (int i = 0; i < 50; ++i)
        communicator.allreduce(data.data(), data.size(), DType::kFloat32, cerar);
      return "finished";
    });
  } catch (const Error& e) {
    message = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0 + 3) << message;  // within the timeout (plus start-up)
  checkRounds(message);  // any round named is one of the run's
  EXPECT_NE(message.find("rank 2: exited with code 9"), std::string::npos) << message;
  // Each survivor names the peer of the transfer that failed: its previous rank on the ring
  // (receiving) or its next (sending). A rank that fails closes all its links so that its
  // peers fail at once, so a survivor may see its next rank's links closed before it learns
  // of rank 2 (a dead socket is reported at once; a silent peer after the timeout).
  for (int rank : {0, 1, 3}) {
    const size_t at = message.find("rank " + std::to_string(rank) + ": ");
    ASSERT_NE(at, std::string::npos) << message;
    const std::string own = message.substr(at, message.find("; rank ", at) - at);
    const bool namesPeer =
        own.find("from rank " + std::to_string((rank + 3) % 4)) != std::string::npos ||
        own.find("to rank " + std::to_string((rank + 1) % 4)) != std::string::npos;
    EXPECT_TRUE(namesPeer) << own;
  }
  EXPECT_EQ(message.find("killed"), std::string::npos) << message;
}

// A rank that hangs (alive, silent) is reported after the configured timeout.
TEST(CommunicatorGloo, SilentRankTimesOutNamingThePeer) {
  LocalJobOptions options;
  options.size = 3;
  options.transport = LocalTransport::kGloo;
  options.timeout = std::chrono::milliseconds(1500);
  options.failureGrace = std::chrono::milliseconds(1000);  // then the silent rank is killed
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    runLocalJob(options, [](int rank, std::shared_ptr<Transport> transport) -> std::string {
      std::vector<double> data(1 << 16, 1.0);
      Communicator communicator(std::move(transport));
      AllreduceOptions ring;
      ring.algorithm = Algorithm::kRing;
      for (int i = 0; i < 3; ++i)
        communicator.allreduce(data.data(), data.size(), DType::kFloat64, ring);
      if (rank == 1) std::this_thread::sleep_for(std::chrono::hours(1));
      communicator.allreduce(data.data(), data.size(), DType::kFloat64, ring);
      return "finished";
    });
  } catch (const Error& e) {
    message = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.5 + 1 + 3) << message;
  checkRounds(message);  // any round named is one of the run's
  EXPECT_NE(message.find("rank 2: timed out after 1500 ms"), std::string::npos) << message;
  EXPECT_NE(message.find("from rank 1"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0: "), std::string::npos) << message;
}

}  // namespace
}  // namespace cerar

namespace cerar {
namespace {

// Rank 0 of 2 whose transfers all succeed (carrying nothing) until wait number `failAt`.
class FailingTransport : public Transport {
 public:
  explicit FailingTransport(int failAt) : failAt_(failAt) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  Duration timeout() const override { return Duration(1000); }
  void postSend(int, const void*, size_t) override {}
  void postRecv(int, void*, size_t) override {}
  void waitSend(int peer) override { step(peer); }
  void waitRecv(int peer) override { step(peer); }
  int waits = 0;

 private:
  void step(int peer) {
    if (++waits == failAt_) throw TimeoutError("rank 0: timed out", peer);
  }
  int failAt_;
};

// A failure in any transfer of a run names a round of the run, with its code and peer.
TEST(CommunicatorErrors, FailuresNameARoundOfTheRun) {
  std::vector<float> data(4096, 1.0f);
  AllreduceOptions options;
  options.verifyParameters = false;
  options.exactOnNonFinite = false;  // its agreement is not a round; only the plan's waits here
  options.components = 8;
  const int total = [&] {
    auto counter = std::make_shared<FailingTransport>(-1);
    Communicator(counter, 1024).allreduce(data.data(), data.size(), DType::kFloat32, options);
    return counter->waits;
  }();
  ASSERT_GT(total, 4);
  for (int failAt = 1; failAt <= total; ++failAt) {
    try {
      Communicator(std::make_shared<FailingTransport>(failAt), 1024)
          .allreduce(data.data(), data.size(), DType::kFloat32, options);
      ADD_FAILURE() << "no failure at wait " << failAt;
    } catch (const TimeoutError& e) {
      EXPECT_EQ(e.peer(), 1);
      EXPECT_EQ(checkRounds(e.what()), 1) << e.what();
    }
  }
}

}  // namespace
}  // namespace cerar
