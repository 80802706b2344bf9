// A scaled result (AllreduceOptions::postscale, an average's 1/N): the exact ring scales each
// slice where it is finished (CodecParams::finishScale), every other run scales after; either
// way the bits are those of the sum times the factor in the data's dtype, on every rank.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "ops/algorithms/plan.h"
#include "ops/codec/half.h"
#include "ops/codec/scale.h"
#include "ops/communicator.h"
#include "ops/executor.h"
#include "ops/transport/inproc.h"
#include "simulate.h"

namespace cerar {
namespace {

using testing::ringOptions;

template <typename T>
bool sameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Inputs of `dtype` (T its storage: float, double or uint16_t for the 16-bit types).
template <typename T>
std::vector<std::vector<T>> inputsOf(DType dtype, int N, size_t d, unsigned seed) {
  const auto values = testing::correlatedInputs<float>(N, d, seed);
  std::vector<std::vector<T>> out(N, std::vector<T>(d));
  for (int r = 0; r < N; ++r) {
    for (size_t e = 0; e < d; ++e) {
      if constexpr (sizeof(T) == 2) {
        out[r][e] = dtype == DType::kFloat16 ? codec::fromFloat<codec::Half>(values[r][e]).bits
                                             : codec::fromFloat<codec::BFloat16>(values[r][e]).bits;
      } else {
        out[r][e] = static_cast<T>(values[r][e]);
      }
    }
  }
  return out;
}

// The scaled run against the sum then a pass of scaledCopy, bit for bit on every rank.
template <typename T>
void expectScaledAsSumThenPass(DType dtype, AllreduceOptions options, int N, size_t d,
                               double factor, size_t segmentBytes) {
  auto scaled = inputsOf<T>(dtype, N, d, 11 * N + unsigned(d));
  auto summed = scaled;
  options.postscale = 1.0;
  testing::simulate(summed, options, segmentBytes, dtype);
  for (auto& buffer : summed) scaledCopy(dtype, buffer.data(), buffer.data(), d, factor);
  options.postscale = factor;
  testing::simulate(scaled, options, segmentBytes, dtype);
  for (int r = 0; r < N; ++r) {
    ASSERT_TRUE(sameBits(scaled[r], summed[r]))
        << dtypeName(dtype) << " N=" << N << " d=" << d << " rank " << r << " factor "
        << factor << " segment " << segmentBytes;
  }
}

TEST(Postscale, RingScalesAsItFinishesToTheBitsOfAPass) {
  const AllreduceOptions ring = ringOptions();
  for (int N : {1, 2, 3, 4, 5, 7}) {
    // Odd lengths, fewer elements than ranks, and segments of 64 bytes and of the default.
    for (size_t d : {size_t(3), size_t(1000 + N)}) {
      for (size_t segment : {size_t(64), Executor::kDefaultSegmentBytes}) {
        for (double factor : {1.0 / N, 0.37}) {
          expectScaledAsSumThenPass<float>(DType::kFloat32, ring, N, d, factor, segment);
          expectScaledAsSumThenPass<double>(DType::kFloat64, ring, N, d, factor, segment);
          expectScaledAsSumThenPass<uint16_t>(DType::kFloat16, ring, N, d, factor, segment);
          expectScaledAsSumThenPass<uint16_t>(DType::kBFloat16, ring, N, d, factor, segment);
        }
      }
    }
  }
}

TEST(Postscale, OtherRunsScaleAfter) {
  AllreduceOptions cerar;
  cerar.algorithm = Algorithm::kCerar;
  AllreduceOptions fp16 = ringOptions();
  fp16.wire = Wire::kFloat16;
  AllreduceOptions int8 = ringOptions();
  int8.wire = Wire::kInt8;
  for (int N : {2, 4}) {
    expectScaledAsSumThenPass<float>(DType::kFloat32, cerar, N, 2000, 1.0 / N, 256);
    expectScaledAsSumThenPass<double>(DType::kFloat64, cerar, N, 999, 0.3, 256);
    expectScaledAsSumThenPass<float>(DType::kFloat32, fp16, N, 2000, 1.0 / N, 256);
    expectScaledAsSumThenPass<float>(DType::kFloat32, int8, N, 2000, 1.0 / N, 4096);
    expectScaledAsSumThenPass<uint16_t>(DType::kBFloat16, int8, N, 2000, 1.0 / N, 4096);
  }
}

// The folded scale itself, run by the executor: each finished slice scaled once.
TEST(Postscale, ExecutorScalesFinishedSlicesOfTheRingOnly) {
  const int N = 4;
  const size_t d = 1001;
  auto scaled = testing::correlatedInputs<float>(N, d, 5);
  auto summed = scaled;
  const auto runAll = [&](std::vector<std::vector<float>>& buffers, double factor) {
    testing::onRanks(N, [&](int rank, std::unique_ptr<Transport> transport) {
      Executor executor(64);
      CodecParams params;
      params.finishScale = factor;
      executor.run(makeRingPlan(N, d, rank), *transport, buffers[rank].data(), params);
    });
  };
  runAll(summed, 1.0);
  runAll(scaled, 0.25);
  for (int r = 0; r < N; ++r) {
    scaledCopy(DType::kFloat32, summed[r].data(), summed[r].data(), d, 0.25);
    EXPECT_TRUE(sameBits(scaled[r], summed[r])) << "rank " << r;
  }
  // CERAR's finished slices with r > 1 are not the sum: refused before any round.
  InprocHub hub(1, std::chrono::seconds(5));
  auto transport = hub.connect(0);
  std::vector<float> one(8, 1.0f);
  CodecParams params;
  params.finishScale = 0.5;
  Executor executor;
  EXPECT_THROW(executor.run(makeCerarPlan(1, 2, 8, 0), *transport, one.data(), params), Error);
}

// Runs allreduce on N threads with per-rank options; the message of each rank's error.
std::vector<std::string> errorsOf(int N, const std::vector<AllreduceOptions>& options,
                                  DType dtype) {
  std::vector<std::string> messages(N);
  testing::onRanks(N, [&](int rank, std::unique_ptr<Transport> transport) {
    std::vector<uint64_t> data(64, 1);  // 8 bytes per element, any dtype here
    try {
      Communicator communicator(std::move(transport));
      communicator.allreduce(data.data(), 64, dtype, options[rank]);
    } catch (const std::exception& e) {
      messages[rank] = e.what();
    }
  });
  return messages;
}

TEST(Postscale, BadScalesFailOnEveryRank) {
  AllreduceOptions scaled = ringOptions();
  scaled.postscale = 0.5;
  for (const auto& message : errorsOf(3, {scaled, scaled, scaled}, DType::kInt32)) {
    EXPECT_NE(message.find("scaled result needs floating"), std::string::npos) << message;
  }
  AllreduceOptions other = scaled;
  other.postscale = 0.25;
  for (const auto& message : errorsOf(3, {scaled, other, scaled}, DType::kFloat32)) {
    EXPECT_NE(message.find("postscale=0.25"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace cerar
