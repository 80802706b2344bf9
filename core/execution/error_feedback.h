// Error feedback (CERAR_ERROR_FEEDBACK, docs/wires.md, "Error feedback"): per tensor, what this
// rank's encodings lost of it in its last lossy-wire all-reduce is added to its values at the
// next all-reduce of the same name, so a wire's losses are sent one step late instead of
// dropped (the error compensation of 1-bit Adam and of PowerSGD). Over K steps the summed
// results then differ from the summed exact sums by one step's error, not K steps'. Float32
// sums and averages reduced on the host; the residuals are this rank's own (each rank adds
// what it lost). Not thread safe: the coordinator thread's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace cerar {

class ErrorFeedback {
 public:
  // One tensor of a fused buffer: its key (process set and name), shape and place.
  struct Part {
    std::string key;
    std::vector<int64_t> shape;
    size_t offset = 0;  // in the buffer, elements
    size_t elements = 0;
  };

  // The residual to add to `key`'s next values, or null: none kept, or kept for another shape
  // (dropped then: a reshaped tensor starts afresh).
  const float* residual(const std::string& key, const std::vector<int64_t>& shape);
  // After a buffer's run: each part's residual becomes lost[offset, offset + elements), or is
  // dropped where `lost` is null (an exact run lost nothing).
  void keep(const std::vector<Part>& parts, const float* lost);
  size_t tensors() const { return residuals_.size(); }

 private:
  struct Residual {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  std::unordered_map<std::string, Residual> residuals_;
};

}  // namespace cerar
