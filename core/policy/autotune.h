// Tuning the fusion buffer while the job trains (CERAR_AUTOTUNE, docs/autotune.md): the
// coordinator rank feeds every cycle's reduced bytes to an Autotuner, which scores the current
// parameters by step throughput and walks a small grid, then freezes the best point. Pure (no
// sockets, no clock of its own: the caller passes the time), so it is unit-tested directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/policy/tuning.h"

namespace cerar {

struct AutotuneOptions {
  int warmupSamples = 3;    // samples at the start point, discarded (CERAR_AUTOTUNE_WARMUP_SAMPLES)
  int stepsPerSample = 10;  // steps scored per point (CERAR_AUTOTUNE_STEPS_PER_SAMPLE)
  // The grids walked one coordinate at a time: thresholds, cycle times, thresholds again (at
  // the best cycle time), scales of c. An empty grid is not tuned.
  std::vector<uint64_t> thresholds = defaultThresholds();
  std::vector<double> cycleTimesMs = {0.5, 1, 2, 5, 10, 20};
  std::vector<double> componentsScales = {0.25, 0.5, 1, 2, 4, 8};

  static std::vector<uint64_t> defaultThresholds();  // 0 and 1..128 MiB in powers of two
};

// One scored sample, for the log (CERAR_AUTOTUNE_LOG) and the stats.
struct AutotuneSample {
  int index = 0;         // 0-based over every sample, warm-up included
  bool warmup = false;   // discarded
  TuningPoint point;     // the parameters it scored
  double score = 0;      // median over its steps of the step's bytes per second
  bool frozeAfter = false;  // tuning ended with this sample
};

// CERAR_AUTOTUNE_LOG's lines (CSV): the header, one line per sample, and after the last sample
// one line `best,...` with the frozen point and its score.
std::string autotuneCsvHeader();
std::string autotuneCsvLine(const AutotuneSample& sample);
std::string autotuneCsvBest(const TuningPoint& point, double score);

class Autotuner {
 public:
  Autotuner(const AutotuneOptions& options, const TuningPoint& start);

  // One cycle's reduced units (their names and total bytes) at time `seconds`. A step ends
  // when a name of the running step comes again (as Horovod counts steps); its score is its
  // bytes over the time from its first cycle to the next step's first cycle. Returns the
  // sample that this cycle completed, if one did. The step running when the point changes
  // mixes two points and is not scored. After freezing, does nothing.
  std::optional<AutotuneSample> record(const std::vector<std::string>& names, double bytes,
                                       bool cerarRan, double seconds);

  // The parameters to use from now on; the best point once frozen.
  const TuningPoint& current() const { return current_; }
  bool frozen() const { return frozen_; }
  TuningState state() const { return {current_, !frozen_, frozen_}; }
  const TuningPoint& best() const { return best_; }
  double bestScore() const { return bestScore_; }
  int samples() const { return samples_; }
  int steps() const { return steps_; }  // steps seen, until frozen

 private:
  std::optional<AutotuneSample> endStep(double seconds);
  AutotuneSample endSample();
  // Advances the walk to the next unmeasured point, or freezes.
  void advance();
  TuningPoint withValue(size_t dimension, size_t index) const;
  size_t gridSize(size_t dimension) const;

  AutotuneOptions options_;
  TuningPoint current_, best_;
  double bestScore_ = -1;
  bool frozen_ = false;
  int warmupLeft_;
  int samples_ = 0;
  int steps_ = 0;
  // The running step.
  std::unordered_set<std::string> seen_;
  double stepStart_ = -1, stepBytes_ = 0;
  bool settling_ = true;  // the running step began under another point: not scored
  std::vector<double> stepScores_;  // of the running sample
  bool sampleRanCerar_ = false;     // some CERAR buffer ran in the running sample
  std::set<TuningPoint> cerarPoints_;  // points whose sample ran a CERAR buffer
  // The walk: the sweep under way (an index into the order above) and the next index in its
  // grid.
  size_t dimension_ = 0, next_ = 0;
  std::map<TuningPoint, double> scores_;
};

}  // namespace cerar
