// The measured error of each budget choice (core/policy/error_calibration.h) on sampled data: all N
// ranks of CERAR or of the exact ring (float32, or with a 16-bit or int8 wire) run in lock
// step in one thread with the codec's own arithmetic, so that thousands of buffers take seconds; the
// result is bit-identical to the executor's (tests/cpp/error_calibration_test.cc checks it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/codec/wire.h"

namespace cerar::errors {

// The suite's data. kGradients draws from a stored set of real gradients (loadGradients).
enum class DataKind { kGaussian, kMeanNoise, kHeavyTailed, kSparse, kGradients };
const char* dataKindName(DataKind kind);
DataKind parseDataKind(const std::string& name);  // throws kInvalidArgument

// Real gradients: `rows` gradients of `length` float32 elements each (minibatches of the
// fidelity models, a random subset of their parameters).
struct GradientSet {
  size_t rows = 0;
  size_t length = 0;
  std::vector<float> values;  // row-major
};
// Reads a 2-D little-endian float32 .npy file; throws kInvalidArgument on anything else.
GradientSet loadGradients(const std::string& path);

// N ranks' float32 buffers of n elements. kGradients needs `real` (rank i's buffer is a window
// of one row, the rows drawn without repeats where there are enough).
std::vector<std::vector<float>> sampleInputs(DataKind kind, int N, size_t n, uint64_t seed,
                                             const GradientSet* real = nullptr);

// One choice: CERAR(c, eps) (c > N), the exact float32 ring (c == N, wire kNone) or the exact
// ring with a 16-bit or int8 wire.
struct Choice {
  int c = 0;
  double eps = 0;
  Wire wire = Wire::kNone;
};

// Runs every rank's all-reduce in place (buffers[i] is rank i's), in lock step. An fp16 wire
// is guarded as the budget's is (codec::fp16GuardBits), an int8 wire as always
// (codec::int8GuardBits): where the guard fails, the float32 ring.
void runLockstep(std::vector<std::vector<float>>& buffers, const Choice& choice);

// max over ranks and elements of |result - sum| / max_e sum_i |g_i(e)|, the sums in extended
// precision; 0 where every input is 0.
double relativeError(const std::vector<std::vector<float>>& inputs,
                     const std::vector<std::vector<float>>& results);

// Samples, runs and measures one buffer.
double measureOnce(DataKind kind, int N, size_t n, const Choice& choice, uint64_t seed,
                   const GradientSet* real = nullptr);

}  // namespace cerar::errors
