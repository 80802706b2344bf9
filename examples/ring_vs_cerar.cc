// The main demo: 4 local ranks over Gloo TCP on loopback, one 64 MiB fp32 buffer, the exact
// ring against CERAR at several c: rounds, payload bytes per rank, error, time.
//
// usage: cerar-demo [--np N] [--mib M] [--repeats K] [--transport gloo|inproc]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tools/allreduce_job.h"

int main(int argc, char** argv) {
  cerar::AllreduceJob base;
  base.np = 4;
  base.transport = cerar::LocalTransport::kGloo;
  base.repeats = 3;
  double mib = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--np") base.np = std::atoi(argv[i + 1]);
    else if (flag == "--mib") mib = std::atof(argv[i + 1]);
    else if (flag == "--repeats") base.repeats = std::atoi(argv[i + 1]);
    else if (flag == "--transport")
      base.transport = std::strcmp(argv[i + 1], "inproc") == 0 ? cerar::LocalTransport::kInproc
                                                               : cerar::LocalTransport::kGloo;
    else {
      std::fprintf(stderr, "usage: cerar-demo [--np N] [--mib M] [--repeats K] "
                           "[--transport gloo|inproc]\n");
      return 2;
    }
  }
  if (base.np < 1 || mib <= 0 || base.repeats < 1) {
    std::fprintf(stderr, "cerar-demo: --np, --mib and --repeats must be positive\n");
    return 2;
  }
  base.elements = size_t(mib * 1024 * 1024 / sizeof(float));
  const double bytes = double(base.elements) * sizeof(float);
  std::printf("cerar demo: N=%d local ranks over %s, %.0f MiB fp32, best of %d runs\n", base.np,
              base.transport == cerar::LocalTransport::kGloo ? "Gloo TCP (loopback)" : "threads",
              mib, base.repeats);
  std::printf("%-14s %6s %10s %16s %14s %11s %9s\n", "algorithm", "c", "rounds",
              "sent/rank (MiB)", "sent/gradient", "max rel err", "time (s)");
  double ringSeconds = 0;
  struct Config {
    cerar::Algorithm algorithm;
    int componentsPerRank;
  };
  for (Config config : {Config{cerar::Algorithm::kRing, 1}, Config{cerar::Algorithm::kCerar, 2},
                        Config{cerar::Algorithm::kCerar, 4}, Config{cerar::Algorithm::kCerar, 8}}) {
    cerar::AllreduceJob job = base;
    job.algorithm = config.algorithm;
    job.components = config.componentsPerRank * job.np;
    try {
      const cerar::AllreduceJobResult result = cerar::runAllreduceJob(job);
      uint64_t most = 0;
      for (uint64_t sent : result.bytesSentPerRank) most = std::max(most, sent);
      if (config.algorithm == cerar::Algorithm::kRing) ringSeconds = result.seconds;
      std::printf("%-14s %6d %10d %16.2f %14.3f %11.2e %9.3f", cerar::algorithmName(job.algorithm),
                  cerar::effectiveComponents(job), result.rounds, double(most) / (1 << 20),
                  double(most) / bytes, result.maxRelativeError, result.seconds);
      if (config.algorithm != cerar::Algorithm::kRing && ringSeconds > 0)
        std::printf("  (%.2fx ring)", result.seconds / ringSeconds);
      std::printf("\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cerar-demo: %s\n", e.what());
      return 1;
    }
  }
  std::printf("ring sends 2(N-1)/N = %.3f of the gradient per rank; CERAR sends 1+(N-2)/c.\n",
              2.0 * (base.np - 1) / base.np);
  return 0;
}
