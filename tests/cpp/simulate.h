// The in-process test harness: N ranks on threads over one hub, one all-reduce on them, the
// options the tests start from.
#pragma once

#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "ops/communicator.h"
#include "ops/transport/inproc.h"

namespace cerar::testing {

template <typename T>
constexpr DType dtypeOf() {
  return sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64;
}

// The exact ring's options, and CERAR's with `c` components and scale `eps`.
inline AllreduceOptions ringOptions() {
  AllreduceOptions options;
  options.algorithm = Algorithm::kRing;
  return options;
}

inline AllreduceOptions cerarOptions(int c, double eps) {
  AllreduceOptions options;
  options.algorithm = Algorithm::kCerar;
  options.components = c;
  options.eps = eps;
  return options;
}

struct SimulationResult {
  std::vector<RunStats> stats;
};

// Runs body(rank, transport) on N threads over one in-process hub; rethrows the first rank's
// exception once all have returned.
template <typename Body>
void onRanks(int N, Body body) {
  InprocHub hub(N, std::chrono::seconds(20));
  std::vector<std::exception_ptr> errors(N);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < N; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank, hub.connect(rank));
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
}

// Runs allreduce in place on every rank's buffer, streamed with `pacing`; rethrows the first
// rank's exception.
template <typename T>
SimulationResult simulatePaced(std::vector<std::vector<T>>& buffers,
                               const AllreduceOptions& options, const Pacing& pacing,
                               DType dtype = dtypeOf<T>()) {
  const int N = static_cast<int>(buffers.size());
  SimulationResult result;
  result.stats.resize(N);
  onRanks(N, [&](int rank, std::unique_ptr<Transport> transport) {
    Communicator communicator(std::move(transport), std::make_unique<Executor>(pacing));
    result.stats[rank] =
        communicator.allreduce(buffers[rank].data(), buffers[rank].size(), dtype, options);
  });
  return result;
}

// The same in segments of `segmentBytes`, without a window.
template <typename T>
SimulationResult simulate(std::vector<std::vector<T>>& buffers, const AllreduceOptions& options,
                          size_t segmentBytes = Executor::kDefaultSegmentBytes,
                          DType dtype = dtypeOf<T>()) {
  return simulatePaced(buffers, options, Pacing{segmentBytes, 0}, dtype);
}

// g_i = mu + noise, mu shared by all ranks (the spec's correlated test inputs).
template <typename T>
std::vector<std::vector<T>> correlatedInputs(int N, size_t d, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> mu(d);
  for (auto& v : mu) v = normal(rng);
  std::vector<std::vector<T>> inputs(N, std::vector<T>(d));
  for (auto& input : inputs)
    for (size_t e = 0; e < d; ++e) input[e] = static_cast<T>(mu[e] + normal(rng));
  return inputs;
}

// The reference sum and the sum of magnitudes, per element, in extended precision so that
// the reference's own rounding stays far below an fp64 result's.
using Reference = long double;
template <typename T>
void exactSums(const std::vector<std::vector<T>>& inputs, std::vector<Reference>& sum,
               std::vector<Reference>& magnitude) {
  const size_t d = inputs[0].size();
  sum.assign(d, 0);
  magnitude.assign(d, 0);
  for (const auto& input : inputs) {
    for (size_t e = 0; e < d; ++e) {
      sum[e] += input[e];
      magnitude[e] += std::abs(static_cast<Reference>(input[e]));
    }
  }
}

}  // namespace cerar::testing
