#include "core/policy/autotune.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"

namespace cerar {

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The sweeps, in order: 0 threshold, 1 cycle time, 2 c's scale. The threshold is swept again
// at the best cycle time: on the measured ResNet-50 sweep the best threshold depends on the
// cycle time, and the second pass took the walk from 1.17x to 1.05x of the sweep's best
// (docs/autotune.md).
constexpr size_t kSweeps[] = {0, 1, 0, 2};
constexpr size_t kStages = sizeof kSweeps / sizeof kSweeps[0];

std::string csvPoint(const TuningPoint& p) {
  std::ostringstream out;
  out.precision(10);
  out << p.thresholdBytes << ',' << p.cycleTimeMs << ',' << p.componentsScale;
  return out.str();
}

std::string csvScore(double score) {
  std::ostringstream out;
  out.precision(6);
  out << score;
  return out.str();
}

}  // namespace

std::string autotuneCsvHeader() {
  return "sample,warmup,fusion_threshold_bytes,cycle_time_ms,components_scale,"
         "score_bytes_per_second";
}

std::string autotuneCsvLine(const AutotuneSample& s) {
  return std::to_string(s.index) + ',' + (s.warmup ? "1" : "0") + ',' + csvPoint(s.point) + ',' +
         csvScore(s.score);
}

std::string autotuneCsvBest(const TuningPoint& point, double score) {
  return "best,0," + csvPoint(point) + ',' + csvScore(score);
}

std::vector<uint64_t> AutotuneOptions::defaultThresholds() {
  std::vector<uint64_t> out{0};
  for (uint64_t mib = 1; mib <= 128; mib *= 2) out.push_back(mib << 20);
  return out;
}

Autotuner::Autotuner(const AutotuneOptions& options, const TuningPoint& start)
    : options_(options), current_(start), best_(start), warmupLeft_(options.warmupSamples) {
  CERAR_CHECK_ARGUMENT(options.stepsPerSample >= 1,
                       "CERAR_AUTOTUNE_STEPS_PER_SAMPLE must be at least 1, got ",
                       options.stepsPerSample);
  CERAR_CHECK_ARGUMENT(options.warmupSamples >= 0,
                       "CERAR_AUTOTUNE_WARMUP_SAMPLES must not be negative, got ",
                       options.warmupSamples);
  if (warmupLeft_ == 0) advance();
}

size_t Autotuner::gridSize(size_t dimension) const {
  switch (dimension) {
    case 0: return options_.thresholds.size();
    case 1: return options_.cycleTimesMs.size();
    default: return options_.componentsScales.size();
  }
}

TuningPoint Autotuner::withValue(size_t dimension, size_t index) const {
  // Coordinate descent: the best point so far, one coordinate replaced. Before any score the
  // best point is the start.
  TuningPoint p = best_;
  switch (dimension) {
    case 0: p.thresholdBytes = options_.thresholds[index]; break;
    case 1: p.cycleTimeMs = options_.cycleTimesMs[index]; break;
    default: p.componentsScale = options_.componentsScales[index]; break;
  }
  return p;
}

void Autotuner::advance() {
  // dimension_ counts the sweeps done (a stage of kSweeps).
  while (dimension_ < kStages) {
    const size_t dimension = kSweeps[dimension_];
    // c only matters where CERAR runs: where the best point ran no CERAR buffer (the ring
    // or fusion below CERAR's sizes), every scale would score the same point again.
    if (dimension == 2 && !cerarPoints_.count(best_)) {
      ++dimension_;
      continue;
    }
    if (next_ < gridSize(dimension)) {
      const TuningPoint p = withValue(dimension, next_++);
      if (scores_.count(p)) continue;  // measured already (the best of an earlier sweep)
      current_ = p;
      return;
    }
    ++dimension_;
    next_ = 0;
  }
  dimension_ = kStages;
  frozen_ = true;
  current_ = best_;
}

std::optional<AutotuneSample> Autotuner::record(const std::vector<std::string>& names,
                                                double bytes, bool cerarRan, double seconds) {
  if (frozen_ || names.empty()) return std::nullopt;
  std::optional<AutotuneSample> sample;
  if (stepStart_ < 0) {
    stepStart_ = seconds;
  } else {
    for (const auto& name : names) {
      if (!seen_.count(name)) continue;
      const TuningPoint before = current_;
      sample = endStep(seconds);
      if (!(current_ == before)) settling_ = true;
      seen_.clear();
      stepStart_ = seconds;
      stepBytes_ = 0;
      break;
    }
  }
  seen_.insert(names.begin(), names.end());
  stepBytes_ += bytes;
  // This cycle belongs to the running step; a settling step's buffers mix two points.
  if (cerarRan && !settling_) sampleRanCerar_ = true;
  return sample;
}

std::optional<AutotuneSample> Autotuner::endStep(double seconds) {
  ++steps_;
  if (settling_) {
    settling_ = false;
    return std::nullopt;
  }
  const double elapsed = seconds - stepStart_;
  if (elapsed > 0) stepScores_.push_back(stepBytes_ / elapsed);
  if (int(stepScores_.size()) < options_.stepsPerSample) return std::nullopt;
  return endSample();
}

AutotuneSample Autotuner::endSample() {
  AutotuneSample sample;
  sample.index = samples_++;
  sample.point = current_;
  sample.score = median(stepScores_);
  stepScores_.clear();
  if (sampleRanCerar_) cerarPoints_.insert(current_);
  sampleRanCerar_ = false;
  if (warmupLeft_ > 0) {
    sample.warmup = true;
    if (--warmupLeft_ == 0) advance();
    sample.frozeAfter = frozen_;
    return sample;
  }
  scores_[current_] = sample.score;
  if (sample.score > bestScore_) {
    bestScore_ = sample.score;
    best_ = current_;
  }
  advance();
  sample.frozeAfter = frozen_;
  return sample;
}

}  // namespace cerar
