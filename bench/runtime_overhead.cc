// cerar-bench-runtime: what the runtime costs on top of the engine, on N local ranks.
//   1. overhead per tensor: steps of many tiny allreduces (negotiation, cache, fusion, handles)
//      against one engine all-reduce of the same total size;
//   2. fused throughput: many mid-size tensors against one tensor of the same total size;
//   3. fusion threshold sweep on the gradient sizes of ResNet-50 (161 tensors, 25.6 M
//      parameters), enqueued in backward order.
// Prints one table per part from rank 0; ranks are processes over Gloo on loopback (default)
// or threads.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/runtime.h"
#include "common/error.h"
#include "ops/communicator.h"
#include "tools/local_job.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Parameter counts of ResNet-50 (torchvision layout: conv, then bn weight and bias).
std::vector<size_t> resnet50Sizes() {
  std::vector<size_t> sizes = {64 * 3 * 7 * 7, 64, 64};
  size_t in = 64;
  const int blocks[4] = {3, 4, 6, 3};
  const size_t widths[4] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    const size_t w = widths[stage];
    for (int b = 0; b < blocks[stage]; ++b) {
      for (size_t n : {in * w, w, w, w * w * 9, w, w, w * 4 * w, 4 * w, 4 * w}) sizes.push_back(n);
      if (b == 0) {
        for (size_t n : {in * 4 * w, 4 * w, 4 * w}) sizes.push_back(n);
      }
      in = 4 * w;
    }
  }
  sizes.push_back(2048 * 1000);
  sizes.push_back(1000);
  return sizes;
}

struct Step {
  double seconds = 0;
  RuntimeStats stats;
};

// Allreduces `sizes` (f32, reverse order as a backward pass would) for `steps` steps after one
// warm-up step; returns the mean step time.
Step runSteps(Runtime& rt, const std::vector<size_t>& sizes, int steps, const std::string& tag) {
  std::vector<std::vector<float>> data;
  for (size_t n : sizes) data.emplace_back(n, 1.0f);
  Step result;
  for (int step = -1; step < steps; ++step) {
    rt.barrier().wait();
    const auto start = Clock::now();
    std::vector<Handle> handles;
    for (size_t i = sizes.size(); i-- > 0;) {
      Tensor t{data[i].data(), DType::kFloat32, {int64_t(sizes[i])}, -1};
      handles.push_back(rt.allreduce(tag + std::to_string(i), t, t, Op::kAverage));
    }
    for (auto& h : handles) h.wait();
    if (step >= 0) result.seconds += since(start);
  }
  result.seconds /= steps;
  rt.barrier().wait();
  result.stats = rt.stats();
  return result;
}

double engineSeconds(Transport& transport, size_t elements, int steps) {
  Communicator communicator(std::shared_ptr<Transport>(&transport, [](Transport*) {}));
  std::vector<float> data(elements, 1.0f);
  AllreduceOptions options;
  options.algorithm = Algorithm::kRing;
  options.verifyParameters = false;
  communicator.allreduce(data.data(), elements, DType::kFloat32, options);  // warm-up
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) {
    communicator.allreduce(data.data(), elements, DType::kFloat32, options);
  }
  return since(start) / steps;
}

std::string gAlgorithm = "auto";  // --algorithm

RuntimeConfig benchConfig(size_t threshold) {
  RuntimeConfig config;
  config.algorithm = gAlgorithm;
  config.fusionThresholdBytes = threshold;
  config.cycleTimeMs = 1;
  return config;
}

std::string rankMain(int rank, std::shared_ptr<Transport> transport, int steps) {
  std::string out;
  auto print = [&](const std::string& line) {
    if (rank == 0) out += line + "\n";
  };
  // 1. Overhead per tensor.
  const int kTiny = 1000;
  const size_t kTinyElements = 16;
  {
    auto rt = Runtime::startWith(benchConfig(64u << 20), transport);
    Step tiny = runSteps(*rt, std::vector<size_t>(kTiny, kTinyElements), steps, "tiny");
    Step one = runSteps(*rt, {kTiny * kTinyElements}, steps, "one");
    rt->shutdown();
    const double engine = engineSeconds(*transport, kTiny * kTinyElements, steps);
    print("part 1: overhead per tensor (1000 tensors of 16 f32 a step, fused)");
    print(detail::concat("  runtime, 1000 tensors: ", tiny.seconds * 1e3, " ms/step = ",
                         tiny.seconds / kTiny * 1e6, " us/tensor; cache hits ",
                         tiny.stats.cacheHits, ", misses ", tiny.stats.cacheMisses,
                         ", buffers ", tiny.stats.fusedBuffers));
    print(detail::concat("  runtime, one tensor of 16000: ", one.seconds * 1e3, " ms/step"));
    print(detail::concat("  engine ring, 16000 elements: ", engine * 1e3, " ms"));
    print(detail::concat("  overhead per tensor vs one runtime tensor: ",
                         (tiny.seconds - one.seconds) / kTiny * 1e6, " us"));
  }
  // 2. Fused throughput: 64 tensors of 256 KiB against one 16 MiB tensor.
  {
    auto rt = Runtime::startWith(benchConfig(64u << 20), transport);
    const size_t each = 64 * 1024;
    Step many = runSteps(*rt, std::vector<size_t>(64, each), steps, "mid");
    Step one = runSteps(*rt, {64 * each}, steps, "whole");
    rt->shutdown();
    const double engine = engineSeconds(*transport, 64 * each, steps);
    const double mib = 64.0 * each * 4 / (1 << 20);
    print("part 2: fused throughput (64 tensors of 256 KiB vs one 16 MiB tensor)");
    print(detail::concat("  64 fused tensors: ", many.seconds * 1e3, " ms/step, ",
                         mib / many.seconds, " MiB/s"));
    print(detail::concat("  one tensor:       ", one.seconds * 1e3, " ms/step, ",
                         mib / one.seconds, " MiB/s"));
    print(detail::concat("  engine ring:      ", engine * 1e3, " ms, ", mib / engine, " MiB/s"));
  }
  // 3. Fusion threshold sweep on ResNet-50.
  const auto sizes = resnet50Sizes();
  size_t total = 0;
  for (size_t n : sizes) total += n;
  print(detail::concat("part 3: fusion threshold sweep, ResNet-50 gradients (", sizes.size(),
                       " tensors, ", total, " f32 = ", total * 4.0 / (1 << 20), " MiB)"));
  for (size_t threshold : {size_t(0), size_t(1) << 20, size_t(4) << 20, size_t(16) << 20,
                           size_t(64) << 20}) {
    auto rt = Runtime::startWith(benchConfig(threshold), transport);
    Step s = runSteps(*rt, sizes, steps, "resnet");
    rt->shutdown();
    print(detail::concat("  threshold ", threshold >> 20, " MiB: ", s.seconds * 1e3,
                         " ms/step, ", s.stats.fusedBuffers / (steps + 1), " buffers/step (",
                         s.stats.ringBuffers, " ring, ", s.stats.cerarBuffers, " cerar in all)"));
  }
  return out;
}

}  // namespace
}  // namespace cerar

int main(int argc, char** argv) {
  using namespace cerar;
  LocalJobOptions options;
  options.size = 4;
  options.transport = LocalTransport::kGloo;
  int steps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--np") options.size = std::atoi(value.c_str());
    else if (flag == "--steps") steps = std::atoi(value.c_str());
    else if (flag == "--algorithm") gAlgorithm = value;
    else if (flag == "--transport") options.transport = value == "inproc" ? LocalTransport::kInproc
                                                                          : LocalTransport::kGloo;
    else {
      std::fprintf(stderr, "usage: cerar-bench-runtime [--np N] [--steps S] "
                           "[--transport gloo|inproc] [--algorithm auto|ring|cerar]\n");
      return 2;
    }
  }
  try {
    auto results = runLocalJob(options, [&](int rank, std::shared_ptr<Transport> transport) {
      return rankMain(rank, std::move(transport), steps);
    });
    std::printf("cerar runtime benchmark: %d ranks over %s, algorithm %s\n%s", options.size,
                options.transport == LocalTransport::kGloo ? "Gloo TCP (loopback)" : "threads",
                gAlgorithm.c_str(), results[0].c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cerar-bench-runtime: %s\n", e.what());
    return 1;
  }
  return 0;
}
