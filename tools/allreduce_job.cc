#include "tools/allreduce_job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace cerar {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double uniform(uint64_t key) { return double(splitmix64(key) >> 11) * 0x1.0p-52 - 1.0; }

template <typename T>
void fill(const AllreduceJob& job, int rank, std::vector<T>& data) {
  for (size_t e = 0; e < data.size(); ++e) data[e] = static_cast<T>(inputValue(job.seed, rank, e));
}

void writeFile(const std::string& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), std::streamsize(bytes));
  CERAR_ENFORCE(out.good(), "cannot write ", path);
}

// Max |out - S| and max |S| over this rank's output, S summed exactly (long double) from every
// rank's input after rounding it to T, as the ranks saw it.
template <typename T>
std::pair<long double, long double> errorAgainstExact(const AllreduceJob& job,
                                                      const std::vector<T>& out) {
  long double maxError = 0, maxSum = 0;
  for (size_t e = 0; e < out.size(); ++e) {
    long double sum = 0;
    for (int rank = 0; rank < job.np; ++rank)
      sum += static_cast<T>(inputValue(job.seed, rank, e));
    maxError = std::max(maxError, std::abs(static_cast<long double>(out[e]) - sum));
    maxSum = std::max(maxSum, std::abs(sum));
  }
  return {maxError, maxSum};
}

template <typename T>
std::string rankMain(const AllreduceJob& job, int rank, std::shared_ptr<Transport> transport) {
  std::vector<T> input(job.elements);
  fill(job, rank, input);
  std::vector<T> data(job.elements);
  Communicator communicator(std::move(transport), job.segmentBytes);
  AllreduceOptions options;
  options.algorithm = job.algorithm;
  options.components = job.components;
  options.eps = job.eps;
  RunStats stats;
  double best = 1e300;
  for (int run = 0; run < std::max(1, job.repeats); ++run) {
    std::copy(input.begin(), input.end(), data.begin());
    stats = communicator.allreduce(data.data(), data.size(), job.dtype, options);
    best = std::min(best, stats.seconds);
  }
  if (!job.outDir.empty()) {
    const std::string base = job.outDir + "/rank" + std::to_string(rank);
    writeFile(base + ".in", input.data(), input.size() * sizeof(T));
    writeFile(base + ".out", data.data(), data.size() * sizeof(T));
  }
  long double maxError = 0, maxSum = 0;
  if (job.checkError) std::tie(maxError, maxSum) = errorAgainstExact(job, data);
  std::ostringstream result;
  result.precision(17);
  result << stats.rounds << ' ' << stats.bytesSent << ' ' << best << ' ' << double(maxError)
         << ' ' << double(maxSum);
  return result.str();
}

}  // namespace

double inputValue(uint64_t seed, int rank, size_t element) {
  const uint64_t base = splitmix64(seed);
  const double mu = uniform(base ^ (element * 2 + 1));
  const double noise = uniform(splitmix64(base + uint64_t(rank) + 1) ^ (element * 2));
  return mu + noise;
}

int effectiveComponents(const AllreduceJob& job) {
  if (job.algorithm == Algorithm::kRing) return job.np;
  return job.components == 0 ? 4 * job.np : job.components;
}

AllreduceJobResult runAllreduceJob(const AllreduceJob& job) {
  CERAR_ENFORCE(isCerarDType(job.dtype), "the job supports f32 and f64, got ",
                dtypeName(job.dtype));
  LocalJobOptions options;
  options.size = job.np;
  options.transport = job.transport;
  const auto results = runLocalJob(options, [&](int rank, std::shared_ptr<Transport> transport) {
    return job.dtype == DType::kFloat32 ? rankMain<float>(job, rank, std::move(transport))
                                        : rankMain<double>(job, rank, std::move(transport));
  });
  AllreduceJobResult result;
  double maxError = 0, maxSum = 0;
  for (const std::string& line : results) {
    std::istringstream in(line);
    uint64_t bytes = 0;
    double seconds = 0, error = 0, sum = 0;
    in >> result.rounds >> bytes >> seconds >> error >> sum;
    CERAR_ENFORCE(!in.fail(), "malformed rank result '", line, "'");
    result.bytesSentPerRank.push_back(bytes);
    result.seconds = std::max(result.seconds, seconds);
    maxError = std::max(maxError, error);
    maxSum = std::max(maxSum, sum);
  }
  result.maxRelativeError = maxSum > 0 ? maxError / maxSum : maxError;
  return result;
}

}  // namespace cerar
