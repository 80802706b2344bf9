// cerar-bench-nonfinite: what CERAR's non-finite check costs on finite data
// (cerar-protocol.md, "Non-finite and near-overflow inputs"), on N local ranks.
//   runtime path: pack the gradient into the fusion buffer, then CERAR, as
//     core/execution/allreduce_pipeline.cc does: the range test fused into the packing copy and the
//     verdict in band, vs the plain copy and no verdict; and each half alone, to show where a
//     difference comes from;
//   engine path: Communicator::allreduce with exactOnNonFinite on (it reads the buffer, and the
//     verdict rides on the parameter agreement) vs off.
// Every repeat runs all variants, in an order rotated by one each repeat; rank 0 prints medians,
// the median of per-repeat ratios with its quartiles, and the same for process CPU time (this
// rank's threads, Gloo's included), which a machine shared with other work disturbs less.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/quantile.h"
#include "core/execution/scaling.h"
#include "common/error.h"
#include "ops/communicator.h"
#include "tools/local_job.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

double cpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

using bench::median;
using bench::quantile;


struct Variant {
  const char* name;
  bool runtimePath;  // else the engine path
  bool fusedCopy;    // runtime path: the packing copy with the range test
  bool verdict;      // exactOnNonFinite
  bool separateHop;  // runtime path: the verdict by PlanRunner::anyRank before the run instead
  int baseline;      // the variant its per-repeat ratio is taken against
};

const Variant kVariants[] = {
    {"runtime path, unchecked (plain copy)", true, false, false, false, 0},
    {"runtime path, checked", true, true, true, false, 0},
    {"  the fused copy alone", true, true, false, false, 0},
    {"  the in-band verdict alone", true, false, true, false, 0},
    {"  checked, verdict by a separate hop", true, true, false, true, 0},
    {"engine path, unchecked", false, false, false, false, 5},
    {"engine path, checked (reads the buffer)", false, false, true, false, 5},
};
constexpr int kCount = sizeof(kVariants) / sizeof(kVariants[0]);
constexpr int kRuntimeVariants = 5;  // the first ones

struct Settings {
  size_t elements = 16u << 20;  // 64 MiB of f32
  int repeats = 21;
  int components = 0;  // 0: the engine's default, 4N
  int variants = kCount;  // kRuntimeVariants: the runtime path only
};

struct Sample {
  double wall = 0, cpu = 0, pack = 0;
};

// One timed all-reduce of `gradient`'s values. The runtime path times the packing copy too;
// the engine path copies untimed (the all-reduce is in place).
Sample once(Communicator& communicator, const std::vector<float>& gradient,
            std::vector<float>& buffer, const Variant& v, int components, Transport& transport) {
  AllreduceOptions options;
  options.components = components;
  options.verifyParameters = !v.runtimePath;  // the runtime skips it; the engine API does not
  options.exactOnNonFinite = v.verdict;
  const size_t n = gradient.size();
  if (!v.runtimePath) std::copy(gradient.begin(), gradient.end(), buffer.begin());
  Sample s;
  const double cpuStart = cpuSeconds();
  const auto start = Clock::now();
  if (v.runtimePath) {
    bool beyond = false;
    if (v.fusedCopy) {
      beyond = scaledCopyChecked(DType::kFloat32, gradient.data(), buffer.data(), n, 1.0,
                                 communicator.size());
    } else {
      scaledCopy(DType::kFloat32, gradient.data(), buffer.data(), n, 1.0);
    }
    if (v.verdict) options.beyondCerarRange = beyond;
    // What device buffers do: every rank's byte to every other before the run (a barrier).
    if (v.separateHop && Executor().anyRank(transport, beyond)) return s;
    s.pack = std::chrono::duration<double>(Clock::now() - start).count();
  }
  const RunStats stats = communicator.allreduce(buffer.data(), n, DType::kFloat32, options);
  CERAR_ENFORCE(!stats.nonFiniteFallback, "finite data fell back to the ring");
  s.wall = std::chrono::duration<double>(Clock::now() - start).count();
  s.cpu = cpuSeconds() - cpuStart;
  return s;
}

// Every rank returns its samples as text, variant-major: wall cpu pack per repeat.
std::string rankMain(int rank, std::shared_ptr<Transport> transport, const Settings& s) {
  Communicator communicator(transport);
  std::mt19937 rng(rank + 1);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> gradient(s.elements), buffer(s.elements);
  for (auto& x : gradient) x = normal(rng);
  for (int v = 0; v < s.variants; ++v)  // warm-up: buffers, plans, connections
    once(communicator, gradient, buffer, kVariants[v], s.components, *transport);
  std::vector<Sample> samples[kCount];
  for (int r = 0; r < s.repeats; ++r) {
    for (int k = 0; k < s.variants; ++k) {
      const int v = (k + r) % s.variants;
      samples[v].push_back(
          once(communicator, gradient, buffer, kVariants[v], s.components, *transport));
    }
  }
  std::string out;
  for (const auto& variant : samples) {
    for (const Sample& x : variant) out += detail::concat(x.wall, " ", x.cpu, " ", x.pack, " ");
  }
  return out;
}

// Rank 0's wall and packing times; CPU time summed over the ranks.
std::string report(const std::vector<std::string>& ranks, int repeats, int variants) {
  std::vector<Sample> samples[kCount];
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    const char* at = ranks[rank].c_str();
    for (int v = 0; v < variants; ++v) {
      samples[v].resize(repeats);
      for (Sample& x : samples[v]) {
        char* end = nullptr;
        const double wall = std::strtod(at, &end), cpu = std::strtod(end, &end),
                     pack = std::strtod(end, &end);
        at = end;
        if (rank == 0) {
          x.wall = wall;
          x.pack = pack;
        }
        x.cpu += cpu;
      }
    }
  }
  auto field = [](const std::vector<Sample>& from, double Sample::*member) {
    std::vector<double> out;
    for (const Sample& x : from) out.push_back(x.*member);
    return out;
  };
  // Per-repeat ratios against the baseline: the runs of one repeat are close in time, so
  // their ratio cancels slow drifts of the machine.
  auto ratios = [&](int v, double Sample::*member) {
    std::vector<double> out;
    for (int r = 0; r < repeats; ++r)
      out.push_back(samples[v][r].*member / (samples[kVariants[v].baseline][r].*member));
    return out;
  };
  std::string out;
  for (int v = 0; v < variants; ++v) {
    const auto wall = ratios(v, &Sample::wall), cpu = ratios(v, &Sample::cpu);
    out += detail::concat("  ", kVariants[v].name, ": ",
                          median(field(samples[v], &Sample::wall)) * 1e3, " ms, CPU ",
                          median(field(samples[v], &Sample::cpu)) * 1e3, " ms");
    if (kVariants[v].baseline != v) {
      out += detail::concat("; ratio ", median(wall), " [", quantile(wall, 0.25), ", ",
                            quantile(wall, 0.75), "], CPU ", median(cpu), " [",
                            quantile(cpu, 0.25), ", ", quantile(cpu, 0.75), "]");
    }
    out += "\n";
  }
  out += detail::concat("  packing copy: plain ", median(field(samples[0], &Sample::pack)) * 1e3,
                        " ms, with the range test ",
                        median(field(samples[2], &Sample::pack)) * 1e3, " ms\n");
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
    else if (flag == "--engine") settings.variants = std::atoi(value.c_str()) ? kCount : kRuntimeVariants;
    else {
      std::fprintf(stderr, "usage: cerar-bench-nonfinite [--np N] [--mib MiB] [--repeats R] "
                           "[--components c] [--engine 0|1]\n");
      return 2;
    }
  }
  if (settings.repeats < 1 || options.size < 2) {
    std::fprintf(stderr, "cerar-bench-nonfinite: needs --repeats >= 1 and --np >= 2\n");
    return 2;
  }
  try {
    auto results = runLocalJob(options, [&](int rank, std::shared_ptr<Transport> transport) {
      return rankMain(rank, std::move(transport), settings);
    });
    std::printf("cerar non-finite check: %d ranks over Gloo TCP (loopback), %zu MiB f32, "
                "CERAR c=%d, %d repeats of every variant (order rotated); medians (wall: rank 0; CPU: "
                "all ranks' processes), and per-repeat ratios to the unchecked run of the same "
                "path [quartiles]\n%s",
                options.size, settings.elements >> 18,
                settings.components ? settings.components : 4 * options.size,
                settings.repeats, report(results, settings.repeats, settings.variants).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cerar-bench-nonfinite: %s\n", e.what());
    return 1;
  }
  return 0;
}
