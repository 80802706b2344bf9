// The device executor against the host executor, bit for bit, on every rank: N ranks on one
// GPU over the in-process transport staged through pinned memory (NCCL cannot put two ranks
// on one GPU, so this is where the multi-rank device logic is checked).
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "tests/gpu/run_plans.h"

namespace cerar {
namespace {

using namespace testing;

// The spec's default eps: 2^-11 for f32, 2^-25 for f64.
double defaultEps(DType dtype) { return std::ldexp(1.0, dtype == DType::kFloat32 ? -11 : -25); }

void expectSame(const std::vector<Bytes>& device, const std::vector<Bytes>& host,
                const std::string& what) {
  for (size_t rank = 0; rank < host.size(); ++rank) {
    const long at = firstDifference(device[rank].data(), host[rank].data(), host[rank].size());
    EXPECT_EQ(at, -1) << what << ": rank " << rank << " differs at byte " << at;
  }
}

std::vector<Bytes> deviceOverInproc(const std::vector<Bytes>& inputs, const PlanFor& planFor,
                                    const CodecParams& params, size_t segmentBytes,
                                    size_t offsetBytes) {
  InprocHub hub(static_cast<int>(inputs.size()), std::chrono::seconds(30));
  return runOnDevice(inputs, planFor, params, [&](int rank) { return hub.connect(rank); },
                     segmentBytes, offsetBytes);
}

TEST(DeviceExecutor, CerarMatchesTheHostExecutorBitForBit) {
  CERAR_REQUIRE_GPU();
  unsigned seed = 1;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const CodecParams params{dtype, ReduceOp::kSum, defaultEps(dtype)};
    for (int N : {2, 3, 4, 5}) {
      for (int r : {1, 2, 3}) {
        const int c = r * N;
        for (size_t d : {size_t(c - 1), size_t(N * r * 64 + 13), size_t(100003)}) {
          if (d == 0) continue;
          const PlanFor planFor = [&](int rank) { return makeCerarPlan(N, c, d, rank); };
          const auto inputs = randomInputs(N, d, dtype, seed++);
          const auto host = runOnHost(inputs, planFor, params);
          // Small segments exercise the streaming; the offset the unaligned kernels.
          for (size_t segment : {size_t(4096), DeviceExecutor::kDefaultSegmentBytes}) {
            const std::string what = detail::concat(dtypeName(dtype), " N=", N, " c=", c,
                                                    " d=", d, " segment=", segment);
            expectSame(deviceOverInproc(inputs, planFor, params, segment, 0), host, what);
          }
          expectSame(deviceOverInproc(inputs, planFor, params, 4096, dtypeSize(dtype)), host,
                     "misaligned buffer");
        }
      }
    }
  }
}

TEST(DeviceExecutor, RingMatchesTheHostForEveryDtypeAndOp) {
  CERAR_REQUIRE_GPU();
  unsigned seed = 100;
  for (DType dtype : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kUInt8,
                      DType::kFloat16, DType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      const int N = 4;
      const size_t d = 10007;
      const PlanFor planFor = [&](int rank) { return makeRingPlan(N, d, rank); };
      const CodecParams params{dtype, op, 0};
      const auto inputs = randomInputs(N, d, dtype, seed++);
      const auto host = runOnHost(inputs, planFor, params);
      expectSame(deviceOverInproc(inputs, planFor, params, 4096, 0), host,
                 detail::concat(dtypeName(dtype), " ", reduceOpName(op)));
    }
  }
}

TEST(DeviceExecutor, RunsTwiceWithTheSameBuffers) {
  CERAR_REQUIRE_GPU();
  const int N = 3, c = 6;
  const size_t d = 5000;
  const CodecParams params{DType::kFloat32, ReduceOp::kSum, defaultEps(DType::kFloat32)};
  const PlanFor planFor = [&](int rank) { return makeCerarPlan(N, c, d, rank); };
  const auto inputs = randomInputs(N, d, DType::kFloat32, 9);
  const auto once = runOnHost(inputs, planFor, params);
  const auto twice = runOnHost(once, planFor, params);
  InprocHub hub(N, std::chrono::seconds(30));
  std::vector<Bytes> data = inputs;
  onThreads(N, [&](int rank) {
    cuda::check(cudaSetDevice(0), "cudaSetDevice");
    StagedTransport transport(hub.connect(rank), 0);
    DeviceBuffer buffer(data[rank].size());
    buffer.upload(data[rank].data(), data[rank].size());
    DeviceExecutor executor(2048);
    for (int run = 0; run < 2; ++run) {
      const RunStats stats = executor.run(planFor(rank), transport, buffer.data(), params);
      if (stats.rounds != c + N - 2) throw Error("wrong round count");
    }
    buffer.download(data[rank].data(), data[rank].size());
  });
  expectSame(data, twice, "second run");
}

}  // namespace
}  // namespace cerar
