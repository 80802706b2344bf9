// One all-reduce on N local ranks with reproducible inputs, checked against an exact reference
// (shared by cerar-conformance, the demo and the benchmarks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/communicator.h"
#include "tools/local_job.h"

namespace cerar {

struct AllreduceJob {
  int np = 4;
  Algorithm algorithm = Algorithm::kCerar;
  int components = 0;  // CERAR's c; 0 picks 4*np
  double eps = 0;      // 0: the spec's default for the dtype
  size_t elements = 0;
  uint64_t seed = 1;
  LocalTransport transport = LocalTransport::kInproc;
  DType dtype = DType::kFloat32;
  std::string outDir;   // when set, rank<i>.in / rank<i>.out are written there
  int repeats = 1;      // timed runs; the input is restored before each
  size_t segmentBytes = Executor::kDefaultSegmentBytes;
  bool checkError = true;  // compute the error against the exact sum on every rank
};

struct AllreduceJobResult {
  int rounds = 0;
  std::vector<uint64_t> bytesSentPerRank;
  double maxRelativeError = 0;  // max over ranks and elements of |out - S| / max |S|
  double seconds = 0;           // per run: the slowest rank's best time
};

// Input of `rank`: g = mu + noise, mu shared by all ranks, both uniform in [-1, 1), a pure
// function of (seed, rank, element) so that any rank can recompute any other's input.
double inputValue(uint64_t seed, int rank, size_t element);

// Runs the job; throws Error with every failing rank's message.
AllreduceJobResult runAllreduceJob(const AllreduceJob& job);

// The effective c of a job (np for the ring).
int effectiveComponents(const AllreduceJob& job);

}  // namespace cerar
