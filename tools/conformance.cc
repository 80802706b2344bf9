// cerar-conformance: runs one all-reduce on N local ranks, writes every rank's input and
// output as raw little-endian arrays, and prints one JSON line with counts and the error.
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

#include "common/error.h"
#include "tools/allreduce_job.h"

namespace {

constexpr const char* kUsage =
    "usage: cerar-conformance --np N --algorithm ring|cerar [--components C] [--eps E]\n"
    "                         --elements D [--seed S] [--transport inproc|gloo]\n"
    "                         [--dtype f32|f64] --out DIR [--segment-bytes B]\n"
    "Runs N local ranks (threads for inproc, processes for gloo), writes DIR/rank<i>.in and\n"
    "DIR/rank<i>.out, and prints one JSON line. --components defaults to 4N and is ignored\n"
    "for ring; --eps defaults to 2^-11 (f32) or 2^-25 (f64).\n";

[[noreturn]] void usageError(const std::string& message) {
  std::cerr << "cerar-conformance: " << message << "\n" << kUsage;
  std::exit(2);
}

long long parseInteger(const std::string& flag, const std::string& text, long long low) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < low)
    usageError(flag + " needs an integer >= " + std::to_string(low) + ", got '" + text + "'");
  return value;
}

double parseEps(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value) || value <= 0)
    usageError("--eps needs a positive finite number, got '" + text + "'");
  return value;
}

cerar::AllreduceJob parseArguments(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::cout << kUsage;
      std::exit(0);
    }
    static const char* known[] = {"--np", "--algorithm", "--components", "--eps",
                                  "--elements", "--seed", "--transport", "--dtype",
                                  "--out", "--segment-bytes"};
    bool isKnown = false;
    for (const char* k : known) isKnown = isKnown || flag == k;
    if (!isKnown) usageError("unknown argument '" + flag + "'");
    if (i + 1 >= argc) usageError(flag + " needs a value");
    flags[flag] = argv[++i];
  }
  for (const char* required : {"--np", "--algorithm", "--elements", "--out"})
    if (!flags.count(required)) usageError(std::string("missing ") + required);

  cerar::AllreduceJob job;
  job.np = int(parseInteger("--np", flags["--np"], 1));
  if (job.np > 64) usageError("--np must be at most 64 local ranks");
  try {
    job.algorithm = cerar::parseAlgorithm(flags["--algorithm"]);
  } catch (const cerar::Error& e) {
    usageError(e.what());
  }
  job.elements = size_t(parseInteger("--elements", flags["--elements"], 0));
  if (flags.count("--seed")) job.seed = uint64_t(parseInteger("--seed", flags["--seed"], 0));
  if (flags.count("--segment-bytes"))
    job.segmentBytes = size_t(parseInteger("--segment-bytes", flags["--segment-bytes"], 1));
  const std::string transport = flags.count("--transport") ? flags["--transport"] : "inproc";
  if (transport == "inproc") {
    job.transport = cerar::LocalTransport::kInproc;
  } else if (transport == "gloo") {
    job.transport = cerar::LocalTransport::kGloo;
  } else {
    usageError("--transport must be inproc or gloo, got '" + transport + "'");
  }
  const std::string dtype = flags.count("--dtype") ? flags["--dtype"] : "f32";
  if (dtype == "f32") {
    job.dtype = cerar::DType::kFloat32;
  } else if (dtype == "f64") {
    job.dtype = cerar::DType::kFloat64;
  } else {
    usageError("unsupported dtype '" + dtype + "' (expected f32 or f64)");
  }
  job.eps = flags.count("--eps") ? parseEps(flags["--eps"]) : cerar::defaultEps(job.dtype);
  if (job.algorithm == cerar::Algorithm::kCerar) {
    job.components =
        flags.count("--components") ? int(parseInteger("--components", flags["--components"], 1))
                                    : 4 * job.np;
    if (job.components % job.np != 0)
      usageError("--components " + std::to_string(job.components) +
                 " must be a multiple of --np " + std::to_string(job.np));
  }
  job.outDir = flags["--out"];
  if (::mkdir(job.outDir.c_str(), 0755) != 0 && errno != EEXIST)
    usageError("cannot create --out directory '" + job.outDir + "'");
  return job;
}

}  // namespace

int main(int argc, char** argv) {
  const cerar::AllreduceJob job = parseArguments(argc, argv);
  try {
    const cerar::AllreduceJobResult result = cerar::runAllreduceJob(job);
    std::printf("{\"np\": %d, \"algorithm\": \"%s\", \"components\": %d, \"eps\": %.17g, "
                "\"elements\": %zu, \"rounds\": %d, \"bytes_sent_per_rank\": [",
                job.np, cerar::algorithmName(job.algorithm), cerar::effectiveComponents(job),
                job.eps, job.elements, result.rounds);
    for (size_t i = 0; i < result.bytesSentPerRank.size(); ++i)
      std::printf("%s%llu", i ? ", " : "", (unsigned long long)result.bytesSentPerRank[i]);
    std::printf("], \"max_rel_err_vs_fp64\": %.6g, \"seconds\": %.6f}\n",
                result.maxRelativeError, result.seconds);
  } catch (const std::exception& e) {
    std::cerr << "cerar-conformance: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
