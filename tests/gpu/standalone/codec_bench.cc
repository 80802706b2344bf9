// Bandwidth of the codec kernels on one GPU, as a markdown table: GB/s per kernel and buffer
// size against the device's peak memory bandwidth (and a device-to-device cudaMemcpy).
// Usage: cerar_codec_bench [peak GB/s]   (default: from the memory clock and bus width)
// Exit status: 77 without a CUDA device, 0 otherwise (the table says what met the target).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "ops/codec/cuda/codec_cuda.h"
#include "ops/codec/cuda/cuda_util.h"

using namespace cerar;

namespace {

constexpr double kTarget = 0.80;  // of peak, for buffers of 64 MiB and more

// Milliseconds per call of fn, best of a few timed batches after a warm-up.
double timeMs(const std::function<void()>& fn) {
  cudaEvent_t start, stop;
  cuda::check(cudaEventCreate(&start), "event");
  cuda::check(cudaEventCreate(&stop), "event");
  fn();
  cuda::check(cudaDeviceSynchronize(), "warm-up");
  double best = 1e30;
  for (int batch = 0; batch < 3; ++batch) {
    const int calls = 5;
    cuda::check(cudaEventRecord(start), "record");
    for (int i = 0; i < calls; ++i) fn();
    cuda::check(cudaEventRecord(stop), "record");
    cuda::check(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    best = std::min(best, double(ms) / calls);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (cuda::deviceCount(&why) == 0) {
    std::printf("no CUDA device: %s (benchmark skipped)\n", why.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), "properties");
  int clockKHz = 0, busBits = 0;
  cudaDeviceGetAttribute(&clockKHz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&busBits, cudaDevAttrGlobalMemoryBusWidth, 0);
  double peak = 2.0 * clockKHz * 1e3 * (busBits / 8) / 1e9;  // double data rate
  if (argc > 1 && std::atof(argv[1]) > 0) peak = std::atof(argv[1]);
  std::printf("device: %s, peak memory bandwidth %.0f GB/s (memory clock %d MHz, %d-bit bus)\n\n",
              prop.name, peak, clockKHz / 1000, busBits);
  std::printf("| kernel | dtype | buffer MiB | bytes moved / element | GB/s | %% of peak | "
              "%% of memcpy | >= %.0f%% |\n|---|---|---|---|---|---|---|---|\n", kTarget * 100);

  const size_t maxBytes = size_t(1) << 30;
  void *y, *g, *out, *st;
  for (void** p : {&y, &g, &out, &st}) cuda::check(cudaMalloc(p, maxBytes), "cudaMalloc");
  for (void* p : {y, g, out, st}) cuda::check(cudaMemset(p, 0, maxBytes), "cudaMemset");
  cuda::CopySegment* segments;
  cuda::check(cudaMalloc(&segments, 64 * sizeof(cuda::CopySegment)), "cudaMalloc");
  int below = 0;
  for (size_t bytes : {size_t(64) << 20, size_t(256) << 20, size_t(1) << 30}) {
    // The fusion-buffer copy: 64 equal tensors into one buffer.
    std::vector<cuda::CopySegment> host(64);
    for (size_t s = 0; s < 64; ++s)
      host[s] = {static_cast<char*>(y) + s * (bytes / 64), static_cast<char*>(out) + s * (bytes / 64),
                 bytes / 64};
    cuda::check(cudaMemcpy(segments, host.data(), 64 * sizeof(host[0]), cudaMemcpyHostToDevice),
                "descriptors");
    const double memcpyMs = timeMs([&] { cudaMemcpyAsync(out, y, bytes, cudaMemcpyDeviceToDevice); });
    const double memcpyGBs = 2.0 * bytes / memcpyMs / 1e6;
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      const size_t n = bytes / dtypeSize(dtype);
      const double eps = std::ldexp(1.0, dtype == DType::kFloat32 ? -11 : -25);
      struct Kernel {
        const char* name;
        int touches;  // arrays read plus arrays written, per element
        std::function<void()> run;
      };
      const std::vector<Kernel> kernels = {
          {"accumulate (sum)", 3, [&] { cuda::accumulate(dtype, ReduceOp::kSum, y, g, out, n, nullptr); }},
          {"finishFirst (sum)", 3, [&] { cuda::finishFirst(dtype, ReduceOp::kSum, y, out, n, nullptr); }},
          {"finishDecode", 4, [&] { cuda::finishDecode(dtype, eps, y, g, out, n, nullptr); }},
          {"storeAndEncode", 4, [&] { cuda::storeAndEncode(dtype, eps, y, g, n, st, out, n, nullptr); }},
          {"storeAndEncode (no store)", 3, [&] { cuda::storeAndEncode(dtype, eps, y, g, n, nullptr, out, n, nullptr); }},
          {"store (memcpy)", 2, [&] { cuda::store(dtype, y, out, n, nullptr); }},
          {"batchedCopy (64 segments)", 2, [&] { cuda::batchedCopy(segments, 64, bytes / 64, nullptr); }},
      };
      for (const auto& kernel : kernels) {
        if (dtype == DType::kFloat64 && kernel.name[0] == 'b') continue;  // dtype-free
        const double ms = timeMs(kernel.run);
        const double gbs = double(kernel.touches) * bytes / ms / 1e6;
        const bool ok = gbs >= kTarget * peak;
        below += ok ? 0 : 1;
        std::printf("| %s | %s | %zu | %d x %zu B | %.0f | %.1f | %.1f | %s |\n", kernel.name,
                    dtypeName(dtype), bytes >> 20, kernel.touches, dtypeSize(dtype), gbs,
                    100 * gbs / peak, 100 * gbs / memcpyGBs, ok ? "yes" : "**no**");
      }
    }
    std::printf("| cudaMemcpy D2D (reference) | - | %zu | 2 | %.0f | %.1f | 100.0 | %s |\n",
                bytes >> 20, memcpyGBs, 100 * memcpyGBs / peak,
                memcpyGBs >= kTarget * peak ? "yes" : "**no**");
  }
  std::printf("\n%d kernel row(s) below %.0f%% of peak\n", below, kTarget * 100);
  for (void* p : {y, g, out, st}) cudaFree(p);
  cudaFree(segments);
  return 0;
}
