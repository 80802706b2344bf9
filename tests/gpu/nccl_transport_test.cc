// The NCCL transport on one GPU: a 1-rank communicator sending to itself (the only NCCL run
// one GPU allows), the watchdog on a receive that never completes, and the bootstrap.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>

#include "common/error.h"
#include "ops/transport/nccl.h"
#include "tests/gpu/gpu_test_util.h"

#ifndef CERAR_NO_GLOO
#include <gloo/rendezvous/hash_store.h>
#endif

namespace cerar {
namespace {

using namespace std::chrono_literals;
using testing::DeviceBuffer;

TEST(NcclTransport, UniqueIdNeedsNoDevice) {
  const NcclId a = newNcclId(), b = newNcclId();
  EXPECT_NE(a, b);
}

TEST(NcclTransport, OneRankRoundTripsThroughItself) {
  CERAR_REQUIRE_GPU();
  NcclOptions options;
  options.timeout = 20s;
  auto transport = connectNcclWithId(newNcclId(), 0, 1, 0, options);
  ASSERT_EQ(transport->size(), 1);
  ASSERT_NE(transport->stream(), nullptr);
  for (size_t bytes : {size_t(1), size_t(4099), size_t(64) << 20}) {
    std::vector<uint32_t> host((bytes + 3) / 4);
    std::iota(host.begin(), host.end(), uint32_t(bytes));
    DeviceBuffer src(bytes), dst(bytes);
    src.upload(host.data(), bytes);
    cuda::check(cudaMemset(dst.data(), 0, bytes), "cudaMemset");
    cuda::check(cudaDeviceSynchronize(), "cudaMemset");  // NCCL's stream does not wait for it
    // Several transfers in flight, matched in posting order.
    const size_t half = bytes / 2;
    if (half > 0) {
      transport->postSend(0, src.data(), half);
      transport->postRecv(0, dst.data(), half);
    }
    transport->postSend(0, src.data() + half, bytes - half);
    transport->postRecv(0, dst.data() + half, bytes - half);
    if (half > 0) transport->waitSend(0);
    transport->waitSend(0);
    if (half > 0) transport->waitRecv(0);
    transport->waitRecv(0);
    std::vector<uint32_t> got(host.size());
    dst.download(got.data(), bytes);
    EXPECT_EQ(testing::firstDifference(got.data(), host.data(), bytes), -1) << bytes << " bytes";
  }
}

TEST(NcclTransport, AReceiveThatNeverCompletesTimesOutAndAbortsTheCommunicator) {
  CERAR_REQUIRE_GPU();
  NcclOptions options;
  options.timeout = 2s;
  auto transport = connectNcclWithId(newNcclId(), 0, 1, 0, options);
  DeviceBuffer buffer(1024);
  transport->postRecv(0, buffer.data(), 1024);  // no matching send
  const auto start = std::chrono::steady_clock::now();
  try {
    transport->waitRecv(0);
    ADD_FAILURE() << "a receive without a send completed";
  } catch (const Error& e) {
    // NCCL may refuse the unmatched self-receive at once or leave it spinning: either way
    // the wait returns within the timeout (plus the abort) and names this rank.
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  EXPECT_THROW(transport->postSend(0, buffer.data(), 1024), Error);  // unusable from now on
}

// A host's level (ops/hierarchical.h) on one rank: NCCL's reduce-scatter and all-gather leave
// the buffer as it was, in place, for every dtype; slices not of the level's shape are refused.
TEST(NcclTransport, OneRankHostLevelLeavesTheBufferInPlace) {
  CERAR_REQUIRE_GPU();
  NcclOptions options;
  options.timeout = 20s;
  auto transport = connectNcclWithId(newNcclId(), 0, 1, 0, options);
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                      DType::kInt32, DType::kInt64, DType::kUInt8}) {
    const size_t count = 4099, bytes = count * dtypeSize(dtype);
    std::vector<uint8_t> host(bytes);
    std::iota(host.begin(), host.end(), uint8_t(7));
    DeviceBuffer buffer(bytes);
    buffer.upload(host.data(), bytes);
    cuda::check(cudaDeviceSynchronize(), "upload");
    transport->reduceScatter(buffer.data(), {count}, dtype, ReduceOp::kSum);
    transport->allGather(buffer.data(), {count}, dtype);
    cuda::check(cudaStreamSynchronize(static_cast<cudaStream_t>(transport->stream())),
                "the level's collectives");
    std::vector<uint8_t> got(bytes);
    buffer.download(got.data(), bytes);
    EXPECT_EQ(testing::firstDifference(got.data(), host.data(), bytes), -1) << dtypeName(dtype);
  }
  DeviceBuffer buffer(64);
  EXPECT_THROW(transport->reduceScatter(buffer.data(), {8, 8}, DType::kFloat32, ReduceOp::kSum),
               InvalidArgumentError);
}

#ifndef CERAR_NO_GLOO
TEST(NcclTransport, ConnectsThroughAStore) {
  CERAR_REQUIRE_GPU();
  gloo::rendezvous::HashStore store;
  auto transport = connectNccl(store, 0, 1, 0);
  EXPECT_EQ(transport->rank(), 0);
  EXPECT_EQ(transport->device(), 0);
}
#endif

}  // namespace
}  // namespace cerar
