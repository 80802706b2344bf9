// cerar-bench-nonfinite: what CERAR's non-finite check costs on finite data
// (cerar-protocol.md, "Non-finite and near-overflow inputs"), on N local ranks.
//   runtime path: pack the gradient into the fusion buffer, then CERAR, as core/dispatch.cc
//     does: with the range test fused into the packing copy and the one-byte agreement, vs
//     the plain copy and no agreement;
//   engine path: Communicator::allreduce with exactOnNonFinite on (it reads the buffer) vs off.
// Variants alternate within each repeat (order flipped every repeat); rank 0 prints the median
// of each and the ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/scaling.h"
#include "ops/common/error.h"
#include "ops/communicator.h"
#include "tools/local_job.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Settings {
  size_t elements = 16u << 20;  // 64 MiB of f32
  int repeats = 7;
  int components = 0;  // 0: the engine's default, 4N
};

// One timed all-reduce of `gradient`'s values. The runtime path times the packing copy too;
// the engine path copies untimed (the all-reduce is in place).
double once(Communicator& communicator, const std::vector<float>& gradient,
            std::vector<float>& buffer, bool runtimePath, bool checked, int components,
            double& packSeconds) {
  AllreduceOptions options;
  options.components = components;
  options.verifyParameters = !runtimePath;  // the runtime skips it; the engine API does not
  options.exactOnNonFinite = checked;
  const size_t n = gradient.size();
  const auto start = Clock::now();
  if (runtimePath) {
    if (checked) {
      options.beyondCerarRange =
          scaledCopyChecked(DType::kFloat32, gradient.data(), buffer.data(), n, 1.0,
                            communicator.size());
    } else {
      scaledCopy(DType::kFloat32, gradient.data(), buffer.data(), n, 1.0);
    }
    packSeconds = since(start);
  } else {
    std::copy(gradient.begin(), gradient.end(), buffer.begin());
  }
  const auto reduceStart = Clock::now();
  const RunStats stats = communicator.allreduce(buffer.data(), n, DType::kFloat32, options);
  CERAR_ENFORCE(!stats.nonFiniteFallback, "finite data fell back to the ring");
  return since(runtimePath ? start : reduceStart);
}

std::string rankMain(int rank, std::shared_ptr<Transport> transport, const Settings& s) {
  Communicator communicator(transport);
  std::mt19937 rng(rank + 1);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> gradient(s.elements), buffer(s.elements);
  for (auto& x : gradient) x = normal(rng);
  // [path][checked]: seconds per repeat; pack seconds of the runtime path.
  std::vector<double> seconds[2][2], pack[2];
  double packSeconds = 0;
  for (int path : {0, 1}) {  // warm-up: buffers, plans, connections
    for (bool checked : {false, true})
      once(communicator, gradient, buffer, path == 0, checked, s.components, packSeconds);
  }
  for (int r = 0; r < s.repeats; ++r) {
    for (int path : {0, 1}) {
      for (int k = 0; k < 2; ++k) {
        const bool checked = (k == 0) == (r % 2 == 0);
        const double t =
            once(communicator, gradient, buffer, path == 0, checked, s.components, packSeconds);
        seconds[path][checked].push_back(t);
        if (path == 0) pack[checked].push_back(packSeconds);
      }
    }
  }
  // The agreement alone (the one-byte exchange), as many times.
  std::vector<double> agreement;
  Executor runner;
  for (int r = 0; r < s.repeats; ++r) {
    const auto start = Clock::now();
    runner.anyRank(*transport, false);
    agreement.push_back(since(start));
  }
  if (rank != 0) return "";
  std::string out;
  const char* names[2] = {"runtime path (pack + CERAR)", "engine path (Communicator) "};
  for (int path : {0, 1}) {
    const double off = median(seconds[path][0]), on = median(seconds[path][1]);
    // Each repeat's two runs are adjacent: their ratio cancels slow drifts of the machine.
    std::vector<double> ratios;
    for (int r = 0; r < s.repeats; ++r)
      ratios.push_back(seconds[path][1][r] / seconds[path][0][r]);
    out += detail::concat("  ", names[path], ": unchecked ", off * 1e3, " ms, checked ",
                          on * 1e3, " ms; ratio of medians ", on / off,
                          ", median of per-repeat ratios ", median(ratios), "\n");
  }
  const double packDelta = median(pack[1]) - median(pack[0]);
  out += detail::concat("  packing copy alone: plain ", median(pack[0]) * 1e3,
                        " ms, with the fused range test ", median(pack[1]) * 1e3, " ms\n");
  out += detail::concat("  agreement alone: ", median(agreement) * 1e3, " ms\n");
  out += detail::concat("  runtime path, unchecked + (pack difference + agreement): ratio ",
                        (median(seconds[0][0]) + packDelta + median(agreement)) /
                            median(seconds[0][0]), "\n");
  return out;
}

}  // namespace
}  // namespace cerar

int main(int argc, char** argv) {
  using namespace cerar;
  LocalJobOptions options;
  options.size = 4;
  options.transport = LocalTransport::kGloo;
  Settings settings;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--np") options.size = std::atoi(value.c_str());
    else if (flag == "--mib") settings.elements = std::strtoull(value.c_str(), nullptr, 10) << 18;
    else if (flag == "--repeats") settings.repeats = std::atoi(value.c_str());
    else if (flag == "--components") settings.components = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "usage: cerar-bench-nonfinite [--np N] [--mib MiB] [--repeats R] "
                           "[--components c]\n");
      return 2;
    }
  }
  try {
    auto results = runLocalJob(options, [&](int rank, std::shared_ptr<Transport> transport) {
      return rankMain(rank, std::move(transport), settings);
    });
    std::printf("cerar non-finite check: %d ranks over Gloo TCP (loopback), %zu MiB f32, "
                "CERAR c=%d, median of %d interleaved repeats\n%s",
                options.size, settings.elements >> 18,
                settings.components ? settings.components : 4 * options.size,
                settings.repeats, results[0].c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cerar-bench-nonfinite: %s\n", e.what());
    return 1;
  }
  return 0;
}
