#include "ops/codec/cuda/cuda_util.h"

#include <cuda_runtime.h>

#include <thread>

#include "common/error.h"

namespace cerar::cuda {

void check(int status, const char* what) {
  if (status != cudaSuccess)
    throw Error(detail::concat("CUDA ", what, ": ",
                               cudaGetErrorString(static_cast<cudaError_t>(status))));
}

bool waitEvent(void* event, std::chrono::milliseconds timeout) {
  if (event == nullptr) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int spins = 0;; ++spins) {
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) check(status, "cudaEventQuery");
    if (std::chrono::steady_clock::now() >= deadline) return false;
    // Spin briefly (kernels and copies are short), then stop burning a core.
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

bool waitStream(void* stream, std::chrono::milliseconds timeout) {
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  const cudaError_t status = cudaEventRecord(event, static_cast<cudaStream_t>(stream));
  bool done = false;
  try {
    check(status, "cudaEventRecord");
    done = waitEvent(event, timeout);
  } catch (...) {
    cudaEventDestroy(event);
    throw;
  }
  cudaEventDestroy(event);
  return done;
}

}  // namespace cerar::cuda
