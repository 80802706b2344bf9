// Runs one plan on every rank of a group, on threads: on the host (the reference Executor over
// the in-process transport) or on the device (DeviceExecutor over a staged transport).
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "ops/algorithms/plan.h"
#include "ops/device_executor.h"
#include "ops/executor.h"
#include "ops/transport/inproc.h"
#include "ops/transport/staged.h"
#include "tests/gpu/gpu_test_util.h"

namespace cerar::testing {

using Bytes = std::vector<std::byte>;
using PlanFor = std::function<Plan(int rank)>;
using InnerFor = std::function<std::unique_ptr<Transport>(int rank)>;

// Runs fn(rank) on one thread per rank; rethrows the first failure.
inline void onThreads(int N, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        fn(rank);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
}

inline std::vector<Bytes> runOnHost(std::vector<Bytes> data, const PlanFor& planFor,
                                    const CodecParams& params) {
  const int N = static_cast<int>(data.size());
  InprocHub hub(N, std::chrono::seconds(30));
  onThreads(N, [&](int rank) {
    auto transport = hub.connect(rank);
    Executor().run(planFor(rank), *transport, data[rank].data(), params);
  });
  return data;
}

// Each rank's buffer sits `offsetBytes` into its device allocation (misaligned on purpose
// when not a multiple of 16).
inline std::vector<Bytes> runOnDevice(std::vector<Bytes> data, const PlanFor& planFor,
                                      const CodecParams& params, const InnerFor& innerFor,
                                      size_t segmentBytes, size_t offsetBytes = 0) {
  const int N = static_cast<int>(data.size());
  onThreads(N, [&](int rank) {
    cuda::check(cudaSetDevice(0), "cudaSetDevice");
    StagedTransport transport(innerFor(rank), 0);
    DeviceBuffer buffer(data[rank].size() + offsetBytes);
    buffer.upload(data[rank].data(), data[rank].size(), offsetBytes);
    DeviceExecutor executor(segmentBytes);
    executor.run(planFor(rank), transport, buffer.data() + offsetBytes, params);
    buffer.download(data[rank].data(), data[rank].size(), offsetBytes);
  });
  return data;
}

// g_i = mu + noise in the dtype's bytes (f32/f64), or random bytes (other dtypes).
inline std::vector<Bytes> randomInputs(int N, size_t d, DType dtype, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> mu(d);
  for (auto& v : mu) v = normal(rng);
  std::vector<Bytes> inputs(N, Bytes(d * dtypeSize(dtype)));
  for (auto& input : inputs) {
    for (size_t e = 0; e < d; ++e) {
      const double v = mu[e] + normal(rng);
      if (dtype == DType::kFloat32) {
        const float f = static_cast<float>(v);
        std::memcpy(input.data() + e * 4, &f, 4);
      } else if (dtype == DType::kFloat64) {
        std::memcpy(input.data() + e * 8, &v, 8);
      } else {
        for (size_t b = 0; b < dtypeSize(dtype); ++b)
          input[e * dtypeSize(dtype) + b] = std::byte(rng() & 0x3f);  // no NaN halves
      }
    }
  }
  return inputs;
}

}  // namespace cerar::testing
