// The error budget's goal case through the whole runtime: N ranks (Gloo on loopback) with link
// figures injected as the probe would measure them on 200 Mbit/s links (50 us, 40 ns/B), a
// 64 MiB float32 sum of each data kind (tools/error_sample.h), CERAR_MAX_ERROR=X,
// CERAR_COMPRESSION=allow, CERAR_DEBUG_ERROR=1; rank 0 prints the choice, the prediction and
// the measured error per bound kind:
//
//   cerar-bench-budget [--ranks 8] [--mib 64] [--max-error 1e-3]
//
// Times are not measured here (the links are not shaped); the cost model decides as it would.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/runtime.h"
#include "tools/error_sample.h"
#include "tools/local_job.h"

using namespace cerar;

int main(int argc, char** argv) {
  int N = 8;
  size_t mib = 64;
  double maxError = 1e-3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--ranks") N = std::atoi(argv[i + 1]);
    else if (flag == "--mib") mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--max-error") maxError = std::atof(argv[i + 1]);
    else return std::fprintf(stderr, "unknown flag %s\n", argv[i]), 2;
  }
  const size_t n = (mib << 20) / sizeof(float);
  LocalJobOptions options;
  options.size = N;
  options.transport = LocalTransport::kGloo;
  options.deadline = std::chrono::minutes(20);
  const auto results = runLocalJob(options, [&](int rank, std::shared_ptr<Transport> transport) {
    std::string out;
    for (const std::string bound : {"strict", "calibrated"}) {
      RuntimeConfig config;
      config.measureLink = false;
      config.linkFigures = std::array<double, 3>{50e-6, 40e-9, 0.2e-9};
      config.maxError = maxError;
      config.errorBound = bound;
      config.compression = "allow";
      config.debugError = true;
      auto rt = Runtime::startWith(config, transport);
      for (auto kind : {errors::DataKind::kGaussian, errors::DataKind::kMeanNoise,
                        errors::DataKind::kHeavyTailed, errors::DataKind::kSparse}) {
        // Every rank draws all ranks' inputs from one seed and keeps its own.
        auto g = std::move(errors::sampleInputs(kind, N, n, 1)[rank]);
        Tensor t{g.data(), DType::kFloat32, {int64_t(n)}, -1};
        rt->allreduce(std::string("g.") + errors::dataKindName(kind), t, t, Op::kSum).wait();
        const RuntimeStats s = rt->stats();
        char line[256];
        std::snprintf(line, sizeof line, "%-10s %-12s choice %-9s predicted %.2g measured %.2g\n",
                      bound.c_str(), errors::dataKindName(kind), s.lastChoice.c_str(),
                      s.predictedErrorLast, s.measuredErrorLast);
        out += line;
      }
      rt->shutdown();
    }
    return out;
  });
  std::printf("N = %d, %zu MiB float32, CERAR_MAX_ERROR=%g, links modelled at 200 Mbit/s\n%s", N,
              mib, maxError, results[0].c_str());
  return 0;
}
