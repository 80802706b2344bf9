// The shared-memory transport: the same bits as the in-process transport for the ring and CERAR
// (rings smaller than a message, so transfers wrap and wait for room), a dead peer named within
// a liveness look, a silent one at the timeout, and its segment gone from /dev/shm once mapped.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "common/error.h"
#include "ops/communicator.h"
#include "ops/transport/shm.h"
#include "simulate.h"

namespace cerar {
namespace {

std::string segmentName() {
  static std::atomic<int> count{0};
  return "/cerar-test-" + std::to_string(getpid()) + "-" + std::to_string(count++);
}

// Runs allreduce on N threads, each over its own mapping of one segment.
template <typename T>
void allreduceOverShm(std::vector<std::vector<T>>& buffers, const AllreduceOptions& options,
                      size_t ringBytes) {
  const int N = int(buffers.size());
  const std::string name = segmentName();
  ShmSegment made = ShmSegment::create(name, shmSegmentBytes(N, ringBytes));
  std::vector<ShmSegment> maps;
  for (int rank = 0; rank < N; ++rank) maps.push_back(ShmSegment::open(name));
  ShmSegment::unlink(name);
  std::vector<std::exception_ptr> errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto transport = std::make_shared<ShmTransport>(
            std::move(maps[rank]), rank, N, ringBytes, std::chrono::seconds(20),
            std::vector<pid_t>(N, getpid()));
        Communicator communicator(transport);
        communicator.allreduce(buffers[rank].data(), buffers[rank].size(),
                               testing::dtypeOf<T>(), options);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
}

TEST(ShmTransport, RingAndCerarGiveTheInprocBitsWhileRingsWrap) {
  std::mt19937 random(7);
  std::normal_distribution<float> gauss;
  for (int N : {2, 3, 4, 8}) {
    for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kCerar}) {
      std::vector<std::vector<float>> shm(N, std::vector<float>(100003));
      for (auto& buffer : shm)
        for (float& x : buffer) x = gauss(random);
      auto inproc = shm;
      AllreduceOptions options;
      options.algorithm = algorithm;
      options.components = algorithm == Algorithm::kCerar ? 4 * N : 0;
      allreduceOverShm(shm, options, 4096);  // a 4 KiB ring: every message wraps
      testing::simulate(inproc, options);
      for (int rank = 0; rank < N; ++rank) {
        ASSERT_EQ(0, std::memcmp(shm[rank].data(), inproc[rank].data(), 4 * shm[rank].size()))
            << "N " << N << " " << algorithmName(algorithm) << " rank " << rank;
      }
    }
  }
}

TEST(ShmTransport, SegmentSizesStayBounded) {
  EXPECT_EQ(shmRingBytes(4), size_t(1) << 20);
  EXPECT_LE(shmRingBytes(64) * 64 * 64, size_t(256) << 20);
  EXPECT_GE(shmRingBytes(1024), size_t(64) << 10);
}

// Rank 1 is a child process that maps the segment and ends (or sleeps) without sending.
void peerThat(bool ends, Transport::Duration timeout, std::string* what, int* peer,
              double* seconds) {
  const std::string name = segmentName();
  const size_t ring = 4096;
  ShmSegment made = ShmSegment::create(name, shmSegmentBytes(2, ring));
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    ShmSegment mine = ShmSegment::open(name);
    if (!ends) ::sleep(30);
    _exit(0);
  }
  ShmTransport transport(std::move(made), 0, 2, ring, timeout, {getpid(), child});
  float data[16];
  transport.postRecv(1, data, sizeof data);
  const auto start = std::chrono::steady_clock::now();
  try {
    transport.waitRecv(1);
  } catch (const Error& e) {
    *what = e.what();
    *peer = e.peer();
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ShmSegment::unlink(name);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + name));
}

TEST(ShmTransport, ADeadPeerIsNamedWithinALook) {
  std::string what;
  int peer = -1;
  double seconds = 0;
  peerThat(true, std::chrono::seconds(20), &what, &peer, &seconds);
  EXPECT_NE(what.find("rank 1 (process"), std::string::npos) << what;
  EXPECT_NE(what.find("has ended"), std::string::npos) << what;
  EXPECT_EQ(peer, 1);
  EXPECT_LT(seconds, 5.0);
}

TEST(ShmTransport, ASilentPeerTimesOut) {
  std::string what;
  int peer = -1;
  double seconds = 0;
  peerThat(false, std::chrono::milliseconds(400), &what, &peer, &seconds);
  EXPECT_NE(what.find("no data from rank 1 within 400 ms"), std::string::npos) << what;
  EXPECT_EQ(peer, 1);
  EXPECT_GE(seconds, 0.39);
  EXPECT_LT(seconds, 5.0);
}

TEST(ShmSegment, MadeExclusiveAndPrivate) {
  const std::string name = segmentName();
  ShmSegment made = ShmSegment::create(name, 4096);
  EXPECT_THROW(ShmSegment::create(name, 4096), Error);
  EXPECT_EQ(std::filesystem::status("/dev/shm" + name).permissions(),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_TRUE(ShmSegment::unlink(name));
  EXPECT_FALSE(ShmSegment::unlink(name));
  static_cast<char*>(made.data())[4095] = 1;  // the mapping outlives the name
}

}  // namespace
}  // namespace cerar
