// A job under injected link and compute figures (RuntimeConfig::linkFigures, computeFigures):
// auto runs what each choice's own cost decides, deterministically (no timing).
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "runtime_scenarios.h"
#include "tools/local_job.h"

namespace cerar {
namespace {

using namespace std::chrono_literals;
using namespace scenarios;

constexpr int kRanks = 4;
constexpr size_t kElements = size_t(4) << 20;  // 16 MiB of float32: auto considers CERAR

struct Figures {
  std::array<double, 3> link;                      // alpha, beta, CERAR's gamma
  std::optional<std::array<double, 2>> compute;    // the ring's add, a 16-bit wire hop
  double maxError = 0;                             // with CERAR_COMPRESSION=allow
};

// One sum of kElements floats on kRanks in-process ranks, every rank under `figures`; the
// choice as "choice cerar=<buffers> wire=<buffers>" (the same on every rank, or the test fails).
std::string runWith(const Figures& figures) {
  LocalJobOptions options;
  options.size = kRanks;
  options.timeout = 20s;
  const auto results = runLocalJob(options, [&](int rank, std::shared_ptr<Transport> transport) {
    RuntimeConfig config = testConfig();
    config.linkFigures = figures.link;
    config.computeFigures = figures.compute;
    if (figures.maxError > 0) {
      config.maxError = figures.maxError;
      config.compression = "allow";
    }
    auto rt = Runtime::startWith(config, transport);
    std::vector<float> g(kElements);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 1.0f + float((i + size_t(rank)) % 7) / 8;
    rt->allreduce("g", f32(g), f32(g), Op::kSum).wait();
    const RuntimeStats s = rt->stats();
    rt->shutdown();
    return detail::concat(s.lastChoice, " cerar=", s.cerarBuffers, " wire=", s.wireBuffers);
  });
  for (int rank = 1; rank < kRanks; ++rank)
    EXPECT_EQ(results[rank], results[0]) << "rank " << rank;
  return results[0];
}

// A fast link (0.1 ns/B) under CERAR's codec at 1 ns/B and the ring's adds at 0.2: the ring.
// The same link and codec charged to both (no compute figures): CERAR, as the model did before
// each choice had its own cost. A slow link (40 ns/B): CERAR; the 16-bit wire's casts at
// 0.5 ns/B keep the budget on the float32 ring on the fast link only.
TEST(RuntimeSelectionJob, InjectedComputeFiguresRunTheRingWhereTheCpuBounds) {
  const std::array<double, 3> fast{1e-7, 0.1e-9, 1.0e-9}, slow{1e-7, 40e-9, 1.0e-9};
  const std::array<double, 2> compute{0.2e-9, 0.5e-9};
  EXPECT_EQ(runWith({fast, compute}), "ring cerar=0 wire=0");
  EXPECT_EQ(runWith({fast, std::nullopt}), "cerar cerar=1 wire=0");
  EXPECT_EQ(runWith({slow, compute}), "cerar cerar=1 wire=0");
  EXPECT_EQ(runWith({fast, compute, 5e-3}), "ring cerar=0 wire=0");
  EXPECT_EQ(runWith({slow, compute, 5e-3}), "ring-fp16 cerar=0 wire=1");
}

}  // namespace
}  // namespace cerar
