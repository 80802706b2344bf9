// Helpers of the GPU tests: skipping without a device, device buffers, bitwise comparison.
#pragma once

#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "ops/codec/cuda/codec_cuda.h"
#include "ops/codec/cuda/cuda_util.h"

// Skips the test (reported as SKIPPED, so ctest passes) on machines without a usable GPU.
#define CERAR_REQUIRE_GPU()                                                         \
  do {                                                                              \
    std::string why_;                                                               \
    if (::cerar::cuda::deviceCount(&why_) == 0) GTEST_SKIP() << "no CUDA device: " << why_; \
  } while (0)

namespace cerar::testing {

// Device memory owning `bytes` bytes (+16 so that tests can offset pointers freely).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    cuda::check(cudaMalloc(&data_, bytes + 16), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(data_); }
  size_t bytes() const { return bytes_; }

  void upload(const void* host, size_t bytes, size_t offset = 0) {
    cuda::check(cudaMemcpy(data() + offset, host, bytes, cudaMemcpyHostToDevice), "upload");
    // A copy from pageable memory may still be in flight, and the transports' streams do not
    // wait for the legacy default stream.
    cuda::check(cudaDeviceSynchronize(), "upload");
  }
  void download(void* host, size_t bytes, size_t offset = 0) const {
    cuda::check(cudaMemcpy(host, data() + offset, bytes, cudaMemcpyDeviceToHost), "download");
  }
  template <typename T>
  std::vector<T> read(size_t count, size_t offset = 0) const {
    std::vector<T> out(count);
    download(out.data(), count * sizeof(T), offset);
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

// Index of the first differing byte, or -1 when equal.
inline long firstDifference(const void* a, const void* b, size_t bytes) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (size_t i = 0; i < bytes; ++i)
    if (x[i] != y[i]) return static_cast<long>(i);
  return -1;
}

}  // namespace cerar::testing
