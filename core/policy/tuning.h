// The fusion parameters every response carries (core/control/message.h), apart from the autotuner
// that may change them (core/policy/autotune.h), so that the messages need not know it.
#pragma once

#include <compare>
#include <cstdint>

namespace cerar {

// The parameters the coordinator rank decides every cycle and sends in its response.
struct TuningPoint {
  uint64_t thresholdBytes = 64u << 20;  // fusion threshold
  double cycleTimeMs = 1.0;
  // Scales the cost model's c for CERAR buffers (1: the model's choice; the result is rounded
  // to a multiple of N, core/policy/selection.h). Ignored where c is forced or the ring runs.
  double componentsScale = 1.0;
  bool operator==(const TuningPoint& other) const = default;
  auto operator<=>(const TuningPoint& other) const = default;
};

// What travels in every response: the point in force and where tuning stands.
struct TuningState {
  TuningPoint point;
  bool tuning = false;  // the autotuner is still sampling
  bool frozen = false;  // it has finished and `point` is its best
  bool operator==(const TuningState& other) const = default;
};

}  // namespace cerar
