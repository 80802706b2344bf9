// Benchmark: cerar's exact ring and CERAR (several c) against Gloo's own all-reduces
// (gloo::allreduce RING and BCUBE, AllreduceRingChunked) on the same Gloo TCP links, N local
// ranks, fp32 sum. Every contender runs in the same job, interleaved per size, so the ratios
// are measured side by side.
//
// usage: cerar-bench-gloo [--np N] [--min-kib K] [--max-mib M] [--repeats R]
//                         [--segment-bytes B]
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/gloo_allreduce.h"
#include "ops/communicator.h"
#include "ops/paced_link.h"
#include "ops/transport/gloo_tcp.h"
#include "tools/local_job.h"

namespace {

struct Settings {
  int np = 4;
  size_t minBytes = 1024;
  size_t maxBytes = size_t(256) << 20;
  int repeats = 3;
  size_t segmentBytes = 0;  // 0: the runtime's pacing without a window (pacingFor(0))
};

// Every contender, or those whose name starts with CERAR_BENCH_ONLY.
std::vector<std::string> contenders(int np) {
  std::vector<std::string> all = {"ring", "cerar c=" + std::to_string(2 * np),
                                  "cerar c=" + std::to_string(4 * np),
                                  "cerar c=" + std::to_string(8 * np), "gloo RING", "gloo BCUBE",
                                  "gloo RingChunked"};
  const char* only = std::getenv("CERAR_BENCH_ONLY");
  if (only == nullptr) return all;
  std::vector<std::string> chosen;
  for (const auto& name : all)
    if (name.rfind(only, 0) == 0) chosen.push_back(name);
  return chosen;
}

// Runs one contender once on `data` (count floats, in place).
void runContender(const std::string& name, cerar::Communicator& communicator,
                  const std::shared_ptr<gloo::Context>& context, float* data, size_t count) {
  if (name == "ring" || name.rfind("cerar", 0) == 0) {
    cerar::AllreduceOptions options;
    options.algorithm = name == "ring" ? cerar::Algorithm::kRing : cerar::Algorithm::kCerar;
    if (name != "ring") options.components = std::atoi(name.c_str() + std::strlen("cerar c="));
    options.verifyParameters = false;  // as the runtime runs it: sizes already agreed
    communicator.allreduce(data, count, cerar::DType::kFloat32, options);
  } else if (name == "gloo RingChunked") {
    gloo::AllreduceRingChunked<float>(context, {data}, int(count)).run();
  } else {
    static uint32_t tag = 0;
    cerar::bench::glooAllreduce(context, name == "gloo BCUBE", data, count, ++tag);
  }
}

// One rank: every size, every contender, `repeats` times; returns "size name seconds" lines.
std::string rankMain(const Settings& settings, const std::vector<std::string>& names,
                     std::shared_ptr<cerar::Transport> transport) {
  auto gloo = std::dynamic_pointer_cast<cerar::GlooTransport>(transport);
  auto context = gloo->context();
  cerar::Communicator communicator(transport);
  communicator.setPacing(settings.segmentBytes ? cerar::Pacing{settings.segmentBytes, 0}
                                               : cerar::pacingFor(0));
  const size_t maxCount = settings.maxBytes / sizeof(float);
  std::vector<float> input(maxCount), data(maxCount);
  for (size_t i = 0; i < maxCount; ++i) input[i] = float((i * 7 + transport->rank()) % 13) - 6;
  std::ostringstream out;
  out.precision(9);
  for (size_t bytes = settings.minBytes; bytes <= settings.maxBytes; bytes *= 4) {
    const size_t count = bytes / sizeof(float);
    for (int rep = 0; rep < settings.repeats + 1; ++rep) {  // the first round warms up
      for (const std::string& name : names) {
        std::memcpy(data.data(), input.data(), bytes);
        gloo::BarrierOptions barrier(context);
        gloo::barrier(barrier);
        const auto start = std::chrono::steady_clock::now();
        try {
          runContender(name, communicator, context, data.data(), count);
        } catch (const std::exception& e) {
          out << bytes << '\t' << name << "\t-1\n";  // not available for this N
          continue;
        }
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (rep > 0) out << bytes << '\t' << name << '\t' << seconds << '\n';
      }
    }
  }
  return out.str();
}

std::string formatSize(size_t bytes) {
  char text[32];
  if (bytes >= (1u << 20)) std::snprintf(text, sizeof text, "%zu MiB", bytes >> 20);
  else std::snprintf(text, sizeof text, "%zu KiB", bytes >> 10);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const double value = std::atof(argv[i + 1]);
    if (flag == "--np") settings.np = int(value);
    else if (flag == "--min-kib") settings.minBytes = size_t(value * 1024);
    else if (flag == "--max-mib") settings.maxBytes = size_t(value * 1024 * 1024);
    else if (flag == "--repeats") settings.repeats = int(value);
    else if (flag == "--segment-bytes") settings.segmentBytes = size_t(value);
    else {
      std::fprintf(stderr, "usage: cerar-bench-gloo [--np N] [--min-kib K] [--max-mib M] "
                           "[--repeats R] [--segment-bytes B]\n");
      return 2;
    }
  }
  if (settings.np < 2 || settings.repeats < 1 || settings.minBytes < 4 ||
      settings.maxBytes < settings.minBytes) {
    std::fprintf(stderr, "cerar-bench-gloo: need --np >= 2, --repeats >= 1, min <= max\n");
    return 2;
  }
  cerar::LocalJobOptions options;
  options.size = settings.np;
  options.transport = cerar::LocalTransport::kGloo;
  options.timeout = std::chrono::minutes(2);
  // Gloo's old-style AllreduceRingChunked slows every later gloo::allreduce on the same
  // context by two orders of magnitude (seen here), so it runs in a job of its own.
  std::vector<std::string> shared, alone;
  for (const auto& name : contenders(settings.np))
    (name == "gloo RingChunked" ? alone : shared).push_back(name);
  std::vector<std::string> results;
  try {
    for (const auto* names : {&shared, &alone}) {
      if (names->empty()) continue;
      auto part = cerar::runLocalJob(options, [&](int, std::shared_ptr<cerar::Transport> t) {
        return rankMain(settings, *names, std::move(t));
      });
      results.insert(results.end(), part.begin(), part.end());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cerar-bench-gloo: %s\n", e.what());
    return 1;
  }
  // Per (size, contender): the slowest rank of each run, then the best run.
  std::map<std::pair<size_t, std::string>, std::vector<double>> runs;
  for (const std::string& lines : results) {
    std::istringstream in(lines);
    std::string line;
    std::map<std::pair<size_t, std::string>, size_t> index;
    while (std::getline(in, line)) {
      const size_t tab1 = line.find('\t'), tab2 = line.rfind('\t');
      const auto key = std::make_pair(size_t(std::stoull(line.substr(0, tab1))),
                                      line.substr(tab1 + 1, tab2 - tab1 - 1));
      const double seconds = std::stod(line.substr(tab2 + 1));
      auto& slots = runs[key];
      const size_t i = index[key]++;
      if (slots.size() <= i) slots.resize(i + 1, 0);
      slots[i] = seconds < 0 || slots[i] < 0 ? -1 : std::max(slots[i], seconds);
    }
  }
  const auto names = contenders(settings.np);
  std::printf("N=%d local ranks, Gloo TCP on loopback, fp32 sum; ms per all-reduce (slowest "
              "rank, best of %d)\n\n| size |", settings.np, settings.repeats);
  for (const auto& name : names) std::printf(" %s |", name.c_str());
  std::printf(" ring / gloo RING | best cerar / best gloo |\n|---|");
  for (size_t i = 0; i < names.size() + 2; ++i) std::printf("---|");
  std::printf("\n");
  for (size_t bytes = settings.minBytes; bytes <= settings.maxBytes; bytes *= 4) {
    std::printf("| %s |", formatSize(bytes).c_str());
    std::map<std::string, double> best;
    for (const auto& name : names) {
      const auto& slots = runs[{bytes, name}];
      double b = slots.empty() ? -1 : *std::min_element(slots.begin(), slots.end());
      best[name] = b;
      if (b < 0) std::printf(" n/a |");
      else std::printf(" %.3f |", b * 1e3);
    }
    auto bestOf = [&](const char* prefix) {
      double b = -1;
      for (const auto& [name, t] : best)
        if (name.rfind(prefix, 0) == 0 && t >= 0 && (b < 0 || t < b)) b = t;
      return b;
    };
    std::printf(" %.2f | %.2f |\n", best["ring"] / best["gloo RING"],
                bestOf("cerar") / bestOf("gloo"));
  }
  return 0;
}
