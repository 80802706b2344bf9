#include "core/policy/coordinator_tuning.h"

#include <algorithm>
#include <string>

#include "core/config/settings.h"
#include "common/error.h"

namespace cerar {
namespace {

std::string describe(const TuningPoint& p) {
  return detail::concat("fusion threshold ", p.thresholdBytes, " B, cycle time ", p.cycleTimeMs,
                        " ms, c scale ", p.componentsScale);
}

JsonObject timelineArgs(const TuningPoint& p) {
  return JsonObject()
      .add("fusion_threshold_bytes", p.thresholdBytes)
      .add("cycle_time_ms", p.cycleTimeMs)
      .add("components_scale", p.componentsScale);
}

constexpr const char* kTuningRow = "cerar.autotune";

}  // namespace

SelectionPolicy selectionPolicyOf(const RuntimeConfig& config) {
  SelectionPolicy policy;
  policy.algorithm = config.algorithm;
  // In shared memory the exact ring costs memory copies alone: nothing for CERAR or a lossy
  // wire to save, so auto (with or without a budget) takes it; forced choices stand.
  if (config.linksInMemory && policy.algorithm == "auto") policy.algorithm = "ring";
  policy.components = config.components;
  policy.eps = config.eps;
  policy.hierarchical = config.hierarchicalAllreduce;
  policy.hosts = config.hosts;
  policy.ranksPerHost = config.ranksPerHost;
  policy.shareCorrection = config.shareCorrection;
  policy.measureError = config.debugError;
  // CERAR_COMPRESSION: without a budget fp16/bf16 force that wire; with one they, or allow
  // (both), name the wires the budget may choose.
  policy.maxError = config.maxError;
  policy.strictErrorBound = config.errorBound == "strict";
  const bool budget = config.maxError > 0 && config.algorithm == "auto";
  const std::vector<std::string> lossy = splitList(config.compression);
  const auto lists = [&](const char* item) {
    return std::find(lossy.begin(), lossy.end(), item) != lossy.end();
  };
  if (budget) {
    policy.allowFp16 = lists("allow") || lists("fp16");
    policy.allowBf16 = lists("allow") || lists("bf16");
    policy.allowInt8 = lists("int8");
  } else if (lossy.size() == 1 && lossy[0] != "allow") {
    policy.wire = parseWire(lossy[0]);
  }
  return policy;
}

AutotuneOptions autotuneOptionsOf(const RuntimeConfig& config, int size) {
  AutotuneOptions options;
  options.warmupSamples = config.autotuneWarmupSamples;
  options.stepsPerSample = config.autotuneStepsPerSample;
  // c is the user's where forced, and does not exist on the ring alone.
  if (config.components > 0 || config.algorithm == "ring" || size <= 2) {
    options.componentsScales.clear();
  }
  return options;
}

FusionTuning::FusionTuning(const RuntimeConfig& config, int size, bool decides,
                           Timeline& timeline, const Logger& logger)
    : timeline_(timeline), logger_(logger) {
  const TuningPoint start{config.fusionThresholdBytes, config.cycleTimeMs, config.componentsScale};
  fixed_.point = applied_.point = start;
  applied_.tuning = config.autotune;  // until the first response says otherwise
  appliedSince_ = Clock::now();
  if (!decides || !config.autotune) return;
  tuner_ = std::make_unique<Autotuner>(autotuneOptionsOf(config, size), start);
  if (config.autotuneLog.empty()) return;
  log_.open(config.autotuneLog, std::ios::out | std::ios::trunc);
  if (log_) {
    log_ << autotuneCsvHeader() << std::endl;
  } else {
    logger_.log(LogLevel::kWarning, "CERAR_AUTOTUNE_LOG: cannot write '" + config.autotuneLog +
                                        "'; tuning without a log");
  }
}

TuningState FusionTuning::decided() const { return tuner_ ? tuner_->state() : fixed_; }

void FusionTuning::feed(const UnitRefs& units,
                        const std::vector<FusedGroup>& groups) {
  if (!tuner_ || tuner_->frozen()) return;
  std::vector<std::string> names;
  double bytes = 0;
  for (const Response* ref : units) {
    const Response& unit = *ref;
    const Kind kind = unit.description.kind;
    const bool reduces =
        kind == Kind::kAllreduce || kind == Kind::kReducescatter || kind == Kind::kAllgather;
    if (!reduces || !unit.error.empty()) continue;
    names.insert(names.end(), unit.names.begin(), unit.names.end());
    bytes += double(unit.description.bytes());
  }
  const bool cerarRan = std::any_of(groups.begin(), groups.end(), [](const FusedGroup& g) {
    return g.algorithm == Algorithm::kCerar;
  });
  const double now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  const auto sample = tuner_->record(names, bytes, cerarRan, now);
  if (!sample) return;
  logger_.log(LogLevel::kInfo, detail::concat("autotune: sample ", sample->index,
                                              sample->warmup ? " (warm-up) " : " ",
                                              describe(sample->point), ": ",
                                              sample->score / 1e6, " MB/s"));
  if (log_) log_ << autotuneCsvLine(*sample) << std::endl;
  if (sample->frozeAfter) {
    logger_.log(LogLevel::kInfo, detail::concat("autotune: frozen after ", tuner_->steps(),
                                                " steps at ", describe(tuner_->best()), " (",
                                                tuner_->bestScore() / 1e6, " MB/s)"));
    if (log_) log_ << autotuneCsvBest(tuner_->best(), tuner_->bestScore()) << std::endl;
  }
}

void FusionTuning::apply(const TuningState& tuning) {
  const auto now = Clock::now();
  if (!(tuning.point == applied_.point)) {
    // The period the old parameters were in force, as one event on the timeline's own row.
    timeline_.record(kTuningRow, "PARAMETERS", appliedSince_, now, timelineArgs(applied_.point));
    appliedSince_ = now;
  }
  if (tuning.frozen && !applied_.frozen) {
    timeline_.record(kTuningRow, "FROZEN", now, now, timelineArgs(tuning.point));
  }
  applied_ = tuning;
}

void FusionTuning::report(RuntimeStats& stats) const {
  stats.fusionThresholdBytes = applied_.point.thresholdBytes;
  stats.cycleTimeMs = applied_.point.cycleTimeMs;
  stats.componentsScale = applied_.point.componentsScale;
  stats.autotuning = applied_.tuning;
  stats.autotuneFrozen = applied_.frozen;
}

}  // namespace cerar
