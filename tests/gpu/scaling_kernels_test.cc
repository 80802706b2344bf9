// The runtime's element-wise kernels (prescale/postscale/average, a joined rank's identity)
// against the host's core/execution/scaling.cc, bit for bit.
#include <gtest/gtest.h>

#include <random>

#include "core/execution/scaling.h"
#include "common/error.h"
#include "ops/codec/half.h"
#include "tests/gpu/gpu_test_util.h"

namespace cerar {
namespace {

using testing::DeviceBuffer;

std::vector<std::byte> randomBytes(size_t n, DType dtype, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0, 3);
  std::vector<float> values(n);
  for (auto& v : values) v = normal(gen);
  std::vector<std::byte> out(n * dtypeSize(dtype));
  if (dtype == DType::kFloat32) {
    std::memcpy(out.data(), values.data(), out.size());
  } else if (dtype == DType::kFloat64) {
    for (size_t i = 0; i < n; ++i) {
      const double d = double(values[i]) / 7.0;
      std::memcpy(out.data() + i * 8, &d, 8);
    }
  } else {  // half types: finite values (NaN payloads differ between CPU and GPU arithmetic)
    for (size_t i = 0; i < n; ++i) {
      const uint16_t bits = dtype == DType::kFloat16
                                ? codec::fromFloat<codec::Half>(values[i]).bits
                                : codec::fromFloat<codec::BFloat16>(values[i]).bits;
      std::memcpy(out.data() + i * 2, &bits, 2);
    }
  }
  return out;
}

TEST(CudaScaling, ScaleMatchesTheHostBitForBit) {
  CERAR_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    for (size_t n : {size_t(1), size_t(17), size_t(100003)}) {
      for (size_t offset : {size_t(0), size_t(1)}) {  // offset 1: the unaligned scalar path
        for (double factor : {0.25, 1.0 / 3.0, 7.5}) {
          auto host = randomBytes(n, dtype, unsigned(n + offset));
          DeviceBuffer device(host.size() + 16);
          const size_t at = offset * dtypeSize(dtype);
          device.upload(host.data(), host.size(), at);
          cuda::scale(dtype, device.data() + at, n, factor, nullptr);
          cuda::check(cudaDeviceSynchronize(), "scale");
          scaledCopy(dtype, host.data(), host.data(), n, factor);
          std::vector<std::byte> got(host.size());
          device.download(got.data(), got.size(), at);
          EXPECT_EQ(testing::firstDifference(got.data(), host.data(), host.size()), -1)
              << dtypeName(dtype) << " n=" << n << " offset=" << offset << " factor=" << factor;
        }
      }
    }
  }
  DeviceBuffer buffer(16);
  EXPECT_THROW(cuda::scale(DType::kInt32, buffer.data(), 4, 2.0, nullptr), Error);
}

TEST(CudaScaling, FillIdentityMatchesTheHost) {
  CERAR_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                      DType::kInt32, DType::kInt64, DType::kUInt8}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      const size_t n = 1001, bytes = n * dtypeSize(dtype);
      std::vector<std::byte> want(bytes), got(bytes);
      fillIdentity(dtype, op, want.data(), n);
      DeviceBuffer device(bytes);
      cuda::fillIdentity(dtype, op, device.data(), n, nullptr);
      cuda::check(cudaDeviceSynchronize(), "fillIdentity");
      device.download(got.data(), bytes);
      EXPECT_EQ(testing::firstDifference(got.data(), want.data(), bytes), -1)
          << dtypeName(dtype) << " " << reduceOpName(op);
    }
  }
}

}  // namespace
}  // namespace cerar
