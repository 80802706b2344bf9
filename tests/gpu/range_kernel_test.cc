// The range test kernel (CERAR's non-finite check on device buffers) against the host's
// ops/codec/range.h: the same verdict for every value class, size and alignment.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/codec/range.h"
#include "tests/gpu/gpu_test_util.h"

namespace cerar {
namespace {

using testing::DeviceBuffer;

template <typename T>
void matchesHost(int N) {
  const DType dtype = sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64;
  const T limit =
      std::ldexp(T(1), std::numeric_limits<T>::max_exponent - codec::rangeGuardBits(N));
  const T values[] = {T(0), T(1.5), std::nextafter(limit, T(0)), limit, -limit,
                      std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                      std::numeric_limits<T>::quiet_NaN()};
  DeviceBuffer flag(sizeof(unsigned));
  for (size_t n : {size_t(1), size_t(17), size_t(100003)}) {
    for (size_t offset : {size_t(0), size_t(1)}) {
      for (T value : values) {
        std::vector<T> host(n, T(0.25));
        host[(n * 7) / 11] = value;
        DeviceBuffer device((n + 1) * sizeof(T));
        device.upload(host.data(), n * sizeof(T), offset * sizeof(T));
        cuda::check(cudaMemset(flag.data(), 0, sizeof(unsigned)), "cudaMemset");
        cuda::rangeTest(dtype, device.data() + offset * sizeof(T), n,
                        codec::rangeExponentLimit(dtype, N),
                        reinterpret_cast<unsigned*>(flag.data()), nullptr);
        cuda::check(cudaDeviceSynchronize(), "rangeTest");
        const bool got = flag.read<unsigned>(1)[0] != 0;
        EXPECT_EQ(got, codec::beyondCerarRange(dtype, host.data(), n, N))
            << dtypeName(dtype) << " N=" << N << " n=" << n << " value=" << value;
      }
    }
  }
}

TEST(CudaRange, TestMatchesTheHost) {
  CERAR_REQUIRE_GPU();
  for (int N : {2, 4, 16}) {
    matchesHost<float>(N);
    matchesHost<double>(N);
  }
}

}  // namespace
}  // namespace cerar
