// What the coordinator derives from the job's settings: the selection policy, and the fusion
// parameters over the job (fixed, or tuned while it runs with CERAR_AUTOTUNE, docs/autotune.md).
#pragma once

#include <fstream>
#include <memory>
#include <vector>

#include "core/policy/autotune.h"
#include "core/log.h"
#include "core/control/message.h"
#include "core/control/operation.h"
#include "core/config/runtime_config.h"
#include "core/runtime_stats.h"
#include "core/policy/selection.h"
#include "core/execution/timeline.h"

namespace cerar {

// The job's settings as the selection policy (the coordinator rank decides with it).
SelectionPolicy selectionPolicyOf(const RuntimeConfig& config);
// The autotuner's options for a job of `size` ranks.
AutotuneOptions autotuneOptionsOf(const RuntimeConfig& config, int size);

// The coordinator rank decides the parameters each response carries, feeding its tuner and
// log (CERAR_AUTOTUNE_LOG); every rank applies what each response carries.
class FusionTuning {
 public:
  // `decides`: this is the coordinator rank.
  FusionTuning(const RuntimeConfig& config, int size, bool decides, Timeline& timeline,
               const Logger& logger);
  // Coordinator rank: the parameters for this cycle's response.
  TuningState decided() const;
  // Coordinator rank: scores the cycle's reduced units while tuning.
  void feed(const UnitRefs& units, const std::vector<FusedGroup>& groups);
  // Every rank: a response's parameters from now on (the timeline marks each change).
  void apply(const TuningState& tuning);
  // The parameters in force (the pace of the next cycle).
  const TuningPoint& applied() const { return applied_.point; }
  // Writes the parameters in force and where tuning stands into `stats`.
  void report(RuntimeStats& stats) const;

 private:
  Timeline& timeline_;
  const Logger& logger_;
  TuningState fixed_;                 // the coordinator rank's while not autotuning
  std::unique_ptr<Autotuner> tuner_;  // coordinator rank with CERAR_AUTOTUNE only
  std::ofstream log_;                 // CERAR_AUTOTUNE_LOG, coordinator rank only
  TuningState applied_;               // the last response's, on every rank
  Clock::time_point appliedSince_{};
};

}  // namespace cerar
