// The hierarchical all-reduce (ops/hierarchical.h) over in-process ranks laid out as H hosts
// of L ranks: every dtype and op, odd sizes, bit-identical results on every rank, exact sums of
// integer-valued data, and the step across hosts as CERAR or a lossy wire.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "ops/codec/half.h"
#include "ops/hierarchical.h"
#include "ops/transport/inproc.h"
#include "ops/transport/subset.h"

namespace cerar {
namespace {

using Bytes = std::vector<std::byte>;

void put(DType dtype, std::byte* at, double v) {
  switch (dtype) {
    case DType::kFloat32: { float x = float(v); std::memcpy(at, &x, 4); break; }
    case DType::kFloat64: std::memcpy(at, &v, 8); break;
    case DType::kFloat16: { auto h = codec::fromFloat<codec::Half>(float(v)); std::memcpy(at, &h, 2); break; }
    case DType::kBFloat16: { auto h = codec::fromFloat<codec::BFloat16>(float(v)); std::memcpy(at, &h, 2); break; }
    case DType::kInt32: { int32_t x = int32_t(v); std::memcpy(at, &x, 4); break; }
    case DType::kInt64: { int64_t x = int64_t(v); std::memcpy(at, &x, 8); break; }
    case DType::kUInt8: { uint8_t x = uint8_t(v); std::memcpy(at, &x, 1); break; }
  }
}

// Runs the hierarchical all-reduce on H x L threads, rank r on host r / L; returns the stats.
std::vector<RunStats> runHosts(int H, int L, std::vector<Bytes>& buffers, DType dtype,
                               const AllreduceOptions& options,
                               std::vector<std::vector<float>>* lost = nullptr) {
  const int N = H * L;
  InprocHub hub(N, std::chrono::seconds(20));
  std::vector<RunStats> stats(N);
  std::vector<std::exception_ptr> errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        std::shared_ptr<Transport> base = hub.connect(rank);
        std::vector<int> local, cross;
        for (int l = 0; l < L; ++l) local.push_back(rank / L * L + l);
        for (int h = 0; h < H; ++h) cross.push_back(h * L + rank % L);
        HierarchicalAllreduce hierarchy(std::make_shared<SubsetTransport>(base->channel(1), local),
                                        std::make_shared<SubsetTransport>(base->channel(2), cross));
        AllreduceOptions mine = options;
        if (lost) mine.lost = (*lost)[rank].data();
        const size_t count = buffers[rank].size() / dtypeSize(dtype);
        stats[rank] = hierarchy.allreduce(buffers[rank].data(), count, dtype, mine);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
  return stats;
}

TEST(HierarchicalSlices, EqualTheLastWithTheRest) {
  EXPECT_EQ(hierarchicalSlices(10, 4), (std::vector<size_t>{2, 2, 2, 4}));
  EXPECT_EQ(hierarchicalSlices(1, 3), (std::vector<size_t>{0, 0, 1}));
  EXPECT_EQ(hierarchicalSlices(0, 2), (std::vector<size_t>{0, 0}));
}

TEST(HierarchicalAllreduce, EveryDtypeAndOpExactOnIntegerValuesAndTheSameBitsEverywhere) {
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                          DType::kInt32,   DType::kInt64,   DType::kUInt8};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax};
  const std::pair<int, int> layouts[] = {{2, 2}, {2, 3}, {3, 2}, {2, 4}, {2, 1}};
  for (auto [H, L] : layouts) {
    const int N = H * L;
    for (DType dtype : dtypes) {
      for (ReduceOp op : ops) {
        for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(13), size_t(1031)}) {
          const size_t width = dtypeSize(dtype);
          std::vector<Bytes> buffers(N, Bytes(count * width));
          std::vector<double> expected(count);
          for (size_t e = 0; e < count; ++e) {
            for (int r = 0; r < N; ++r) {
              const double v = double((e * 7 + size_t(r) * 3) % 5);  // exact in every dtype
              put(dtype, buffers[r].data() + e * width, v);
              expected[e] = r == 0              ? v
                            : op == ReduceOp::kSum ? expected[e] + v
                            : op == ReduceOp::kMin ? std::min(expected[e], v)
                                                   : std::max(expected[e], v);
            }
          }
          AllreduceOptions options;
          options.algorithm = Algorithm::kRing;
          options.op = op;
          runHosts(H, L, buffers, dtype, options);
          Bytes want(count * width);
          for (size_t e = 0; e < count; ++e) put(dtype, want.data() + e * width, expected[e]);
          for (int r = 0; r < N; ++r) {
            ASSERT_EQ(buffers[r], want) << H << "x" << L << " " << dtypeName(dtype) << " "
                                        << reduceOpName(op) << " d=" << count << " rank " << r;
          }
        }
      }
    }
  }
}

TEST(HierarchicalAllreduce, RandomFloatsAgreeAcrossRanksAndWithTheReference) {
  for (auto [H, L] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}}) {
    const int N = H * L;
    const size_t count = 10007;  // prime: no layout divides it
    std::mt19937 rng(N);
    std::normal_distribution<double> normal(1.0, 1.0);
    std::vector<Bytes> buffers(N, Bytes(count * 8));
    std::vector<double> sum(count, 0), magnitude(count, 0);
    for (int r = 0; r < N; ++r) {
      auto* values = reinterpret_cast<double*>(buffers[r].data());
      for (size_t e = 0; e < count; ++e) {
        values[e] = normal(rng);
        sum[e] += values[e];
        magnitude[e] += std::abs(values[e]);
      }
    }
    AllreduceOptions options;
    options.algorithm = Algorithm::kRing;
    runHosts(H, L, buffers, DType::kFloat64, options);
    for (int r = 1; r < N; ++r) ASSERT_EQ(buffers[r], buffers[0]) << "rank " << r;
    const auto* result = reinterpret_cast<const double*>(buffers[0].data());
    for (size_t e = 0; e < count; ++e) {
      ASSERT_NEAR(result[e], sum[e], 1e-13 * magnitude[e]) << e;
    }
  }
}

// The step across hosts as CERAR (c a multiple of H) or a lossy wire: the same bits on every
// rank, within those choices' tolerance of the reference.
TEST(HierarchicalAllreduce, CerarAndLossyWiresAcrossHosts) {
  const int H = 2, L = 2, N = H * L;
  const size_t count = 4099;
  for (int choice = 0; choice < 3; ++choice) {
    std::mt19937 rng(choice);
    std::normal_distribution<float> normal(1.0f, 1.0f);
    std::vector<Bytes> buffers(N, Bytes(count * 4));
    std::vector<double> sum(count, 0);
    for (int r = 0; r < N; ++r) {
      auto* values = reinterpret_cast<float*>(buffers[r].data());
      for (size_t e = 0; e < count; ++e) sum[e] += values[e] = normal(rng);
    }
    AllreduceOptions options;
    options.algorithm = choice == 0 ? Algorithm::kCerar : Algorithm::kRing;
    options.components = choice == 0 ? 8 : 0;
    options.wire = choice == 1 ? Wire::kFloat16 : choice == 2 ? Wire::kInt8 : Wire::kNone;
    std::vector<std::vector<float>> lost(N, std::vector<float>(count, 1.0f));
    const auto stats = runHosts(H, L, buffers, DType::kFloat32, options, &lost);
    for (int r = 1; r < N; ++r) ASSERT_EQ(buffers[r], buffers[0]) << "choice " << choice;
    const auto* result = reinterpret_cast<const float*>(buffers[0].data());
    double worst = 0, scale = 0;
    for (size_t e = 0; e < count; ++e) {
      worst = std::max(worst, std::abs(result[e] - sum[e]));
      scale = std::max(scale, std::abs(sum[e]));
    }
    EXPECT_LT(worst / scale, choice == 2 ? 3e-2 : 1e-2) << "choice " << choice;
    EXPECT_GT(worst, 0.0) << "choice " << choice << ": a lossy step that lost nothing";
    EXPECT_FALSE(stats[0].wireFallback);
    // Losses are this rank's slice's; elsewhere zero.
    const std::vector<size_t> slices = hierarchicalSlices(count, L);
    for (size_t e = slices[0]; e < count; ++e) ASSERT_EQ(lost[0][e], 0.0f) << e;
  }
}

}  // namespace
}  // namespace cerar
