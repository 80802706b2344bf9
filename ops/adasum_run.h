// Runs the Adasum schedule (ops/algorithms/adasum.h) in place over any transport, on host
// memory: halving levels with the per-tensor dot products summed over each level's group, then
// the allgather of the pieces.
#pragma once

#include <cstddef>
#include <vector>

#include "common/dtype.h"
#include "ops/run_types.h"
#include "ops/transport/transport.h"

namespace cerar {

class AdasumRunner {
 public:
  // `data` holds the tensors packed back to back, tensorSizes[t] elements each, of dtype (f16,
  // bf16, f32, f64); every rank passes the same sizes. The transport's size must be a power of
  // two (InvalidArgumentError otherwise, before anything is sent).
  RunStats run(Transport& transport, void* data, DType dtype,
               const std::vector<size_t>& tensorSizes);

 private:
  std::vector<std::byte> scratch_;  // the partner's half, reused between runs
};

}  // namespace cerar
