#include "core/config/settings.h"

#include <type_traits>

#include "core/log.h"
#include "common/env.h"
#include "common/error.h"

namespace cerar {
namespace {

using C = RuntimeConfig;
constexpr SettingKind kJob = SettingKind::kJob;
constexpr SettingKind kRank = SettingKind::kRank;

// The job-wide rows keep the order of the job settings' encoding: a new one goes last among
// them, with a new encoding version.
std::vector<Setting> makeSettings() {
  return {
      {.field = &C::algorithm, .attribute = "algorithm", .variable = "CERAR_ALGORITHM",
       .kind = kJob, .why = "selects the plan: ring and CERAR post different transfers",
       .choices = {"auto", "ring", "cerar"},
       .flag = {.name = "algorithm", .help = "all-reduce algorithm (CERAR_ALGORITHM)"}},
      {.field = &C::components, .attribute = "components", .variable = "CERAR_COMPONENTS",
       .kind = kJob, .why = "CERAR's c (0: the cost model's); rounds and message sizes follow c",
       .low = 0, .high = 1 << 24,
       .flag = {.name = "components",
                .help = "CERAR's component count c (CERAR_COMPONENTS; 0 = cost model)"}},
      {.field = &C::eps, .attribute = "eps", .variable = "CERAR_EPS", .kind = kJob,
       .why = "the codec's scale (0: the default per dtype); different eps decode to wrong sums",
       .flag = {.name = "eps", .help = "CERAR's eps (CERAR_EPS)"}},
      {.field = &C::shareCorrection, .attribute = "share_correction",
       .variable = "CERAR_SHARE_CORRECTION", .kind = kJob,
       .why = "decoding of CERAR buffers; kept uniform so ranks' results follow one documented "
              "rule"},
      {.field = &C::compression, .attribute = "compression", .variable = "CERAR_COMPRESSION",
       .kind = kJob,
       .why = "the lossy wire of float32 sums (int8: also float16/bfloat16 ones): fp16/bf16/int8 "
              "messages are not the bytes the peer expects otherwise; every rank must send and "
              "decode the same format",
       .choices = {"none", "fp16", "bf16", "int8", "allow"}, .list = true},
      {.field = &C::maxError, .attribute = "max_error", .variable = "CERAR_MAX_ERROR",
       .kind = kJob,
       .why = "an error budget (0: none) within which the coordinator rank chooses ring, CERAR "
              "or a 16-bit wire (docs/wires.md); kept uniform so every rank reports the same "
              "policy"},
      {.field = &C::debugError, .attribute = "debug_error", .variable = "CERAR_DEBUG_ERROR",
       .kind = kJob, .why = "adds an exact ring per CERAR buffer: a collective"},
      {.field = &C::fusionThresholdBytes, .attribute = "fusion_threshold_bytes",
       .variable = "CERAR_FUSION_THRESHOLD", .aliases = {"HOROVOD_FUSION_THRESHOLD"}, .kind = kJob,
       .why = "fusion buffer layout and size (0: no fusion)", .low = 0, .high = 1ll << 40,
       .flag = {.name = "fusion-threshold-mb",
                .help = "fusion buffer size in MiB (CERAR_FUSION_THRESHOLD); 0 disables",
                .scale = 1 << 20}},
      {.field = &C::cycleTimeMs, .attribute = "cycle_time_ms", .variable = "CERAR_CYCLE_TIME",
       .aliases = {"HOROVOD_CYCLE_TIME"}, .kind = kJob,
       .why = "milliseconds per cycle (positive): negotiation is a collective every cycle; one "
              "pace",
       .flag = {.name = "cycle-time-ms", .help = "CERAR_CYCLE_TIME"}},
      {.field = &C::cacheCapacity, .attribute = "cache_capacity",
       .variable = "CERAR_CACHE_CAPACITY", .aliases = {"HOROVOD_CACHE_CAPACITY"}, .kind = kJob,
       .why = "cache bits refer to slots that every rank must hold (0: no cache)", .low = 0,
       .high = 1 << 24},
      {.field = &C::stallCheckSeconds, .attribute = "stall_check_seconds",
       .variable = "CERAR_STALL_CHECK_TIME_SECONDS",
       .aliases = {"HOROVOD_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_TIME_SECONDS"},
       .kind = kJob,
       .why = "one policy for warning of a unit some ranks lack (0: no warning)"},
      {.field = &C::stallShutdownSeconds, .attribute = "stall_shutdown_seconds",
       .variable = "CERAR_STALL_SHUTDOWN_TIME_SECONDS",
       .aliases = {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"}, .kind = kJob,
       .why = "one policy for failing a unit some ranks lack (0: never)"},
      {.field = &C::timeoutSeconds, .attribute = "timeout_seconds",
       .variable = "CERAR_TIMEOUT_SECONDS", .aliases = {"HOROVOD_GLOO_TIMEOUT_SECONDS"},
       .kind = kJob,
       .why = "seconds (positive) of waiting for a dead or silent peer: one limit, so every rank "
              "gives up alike",
       .flag = {.name = "timeout",
                .help = "seconds a rank waits for a dead peer (CERAR_TIMEOUT_SECONDS)"}},
      {.field = &C::measureLink, .attribute = "measure_link", .variable = "CERAR_MEASURE_LINK",
       .kind = kJob, .why = "the link probe at start is a collective"},
      {.field = &C::deviceTransport, .attribute = "device_transport",
       .variable = "CERAR_DEVICE_TRANSPORT", .kind = kJob,
       .why = "NCCL or staged Gloo must be the same on every rank",
       .choices = {"auto", "nccl", "gloo"}},
      {.field = &C::componentsScale, .attribute = "components_scale",
       .variable = "CERAR_COMPONENTS_SCALE", .kind = kJob,
       .why = "a positive factor on the cost model's c; rounds and message sizes follow c"},
      {.field = &C::autotune, .attribute = "autotune", .variable = "CERAR_AUTOTUNE",
       .aliases = {"HOROVOD_AUTOTUNE"}, .kind = kJob,
       .why = "the coordinator rank tunes for everyone; its parameters travel in each response "
              "(docs/autotune.md)",
       .flag = {.name = "autotune",
                .help = "tune fusion threshold, cycle time and c while training "
                        "(CERAR_AUTOTUNE=1)"}},
      {.field = &C::autotuneLog, .attribute = "autotune_log", .variable = "CERAR_AUTOTUNE_LOG",
       .aliases = {"HOROVOD_AUTOTUNE_LOG"}, .kind = kJob,
       .why = "the autotuner's CSV, one line per sample (written by rank 0)",
       .flag = {.name = "autotune-log-file",
                .help = "CSV of the autotuner's samples (CERAR_AUTOTUNE_LOG)"}},
      {.field = &C::autotuneWarmupSamples, .attribute = "autotune_warmup_samples",
       .variable = "CERAR_AUTOTUNE_WARMUP_SAMPLES",
       .aliases = {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES"}, .kind = kJob,
       .why = "samples the autotuner discards first", .low = 0, .high = 1 << 20,
       .flag = {.name = "autotune-warmup-samples", .help = "CERAR_AUTOTUNE_WARMUP_SAMPLES"}},
      {.field = &C::autotuneStepsPerSample, .attribute = "autotune_steps_per_sample",
       .variable = "CERAR_AUTOTUNE_STEPS_PER_SAMPLE",
       .aliases = {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"}, .kind = kJob,
       .why = "steps the autotuner times per sample", .low = 1, .high = 1 << 20,
       .flag = {.name = "autotune-steps-per-sample", .help = "CERAR_AUTOTUNE_STEPS_PER_SAMPLE"}},
      {.field = &C::dynamicProcessSets, .attribute = "dynamic_process_sets",
       .variable = "CERAR_DYNAMIC_PROCESS_SETS", .aliases = {"HOROVOD_DYNAMIC_PROCESS_SETS"},
       .kind = kJob,
       .why = "whether sets may be added and removed after init; a change is a collective of "
              "every rank (docs/process-sets.md)"},
      {.field = &C::errorBound, .attribute = "error_bound", .variable = "CERAR_ERROR_BOUND",
       .kind = kJob,
       .why = "what CERAR_MAX_ERROR compares against: errors measured under in 99.9 % of "
              "buffers, or worst-case bounds (docs/wires.md); the coordinator rank decides",
       .choices = {"calibrated", "strict"}},
      {.field = &C::errorFeedback, .attribute = "error_feedback",
       .variable = "CERAR_ERROR_FEEDBACK", .kind = kJob,
       .why = "whether a lossy wire's losses are added to the tensor's next all-reduce "
              "(docs/wires.md); kept uniform so every rank compensates alike"},
      {.field = &C::sharedMemory, .attribute = "shared_memory",
       .variable = "CERAR_SHARED_MEMORY", .kind = kJob,
       .why = "whether the ranks of a one-host job exchange data through shared memory "
              "instead of TCP loopback (docs/shared-memory.md); every rank must use the same links"},
      {.field = &C::lazyLinks, .attribute = "lazy_links", .variable = "CERAR_LAZY_LINKS",
       .kind = kJob,
       .why = "whether the data links connect at start only where the ring and the control tree "
              "need them, the others on first use (docs/scale.md); both ends of a link must "
              "agree"},
      {.field = &C::hierarchicalAllreduce, .attribute = "hierarchical_allreduce",
       .variable = "CERAR_HIERARCHICAL_ALLREDUCE",
       .aliases = {"HOROVOD_HIERARCHICAL_ALLREDUCE"}, .kind = kJob,
       .why = "whether a job on several hosts reduces host by host (docs/hierarchical.md): "
              "every rank must run the same steps",
       .choices = {"auto", "0", "1"}},
      {.field = &C::controlFanout, .attribute = "control_fanout",
       .variable = "CERAR_CONTROL_FANOUT", .kind = kJob,
       .why = "the shape of the tree every negotiation cycle travels (docs/scale.md): every "
              "rank must send to the parent its peers receive from",
       .low = 1, .high = 1 << 16},

      {.field = &C::rank, .attribute = "rank", .variable = "CERAR_RANK",
       .aliases = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, .kind = kRank,
       .why = "what makes a rank itself; from the launcher's variables (cerarrun's, torchrun's, "
              "Open MPI's, SLURM's)",
       .ownRule = true},
      {.field = &C::size, .attribute = "size", .variable = "CERAR_SIZE",
       .aliases = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, .kind = kRank,
       .why = "the number of ranks, from the launcher's variables", .ownRule = true},
      {.field = &C::localRank, .attribute = "local_rank", .variable = "CERAR_LOCAL_RANK",
       .aliases = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, .kind = kRank,
       .why = "this rank among those of its host, from the launcher's variables",
       .ownRule = true},
      {.field = &C::localSize, .attribute = "local_size", .variable = "CERAR_LOCAL_SIZE",
       .aliases = {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}, .kind = kRank,
       .why = "the ranks of this host, from the launcher's variables", .ownRule = true},
      {.field = &C::rendezvousAddr, .attribute = "rendezvous_addr",
       .variable = "CERAR_RENDEZVOUS_ADDR", .aliases = {"MASTER_ADDR"}, .kind = kRank,
       .why = "the store's host, needed to reach the store where settings are agreed",
       .ownRule = true},
      {.field = &C::rendezvousPort, .attribute = "rendezvous_port",
       .variable = "CERAR_RENDEZVOUS_PORT", .kind = kRank,
       .why = "the store's port (torchrun: MASTER_PORT + 1)", .ownRule = true},
      {.field = &C::secret, .attribute = "secret", .variable = "CERAR_SECRET", .kind = kRank,
       .why = "presented to the store before anything is shared (policy: docs/rendezvous.md)"},
      {.field = &C::jobId, .attribute = "job_id", .variable = "CERAR_JOB_ID", .kind = kRank,
       .why = "the job's identity at the store: a rank of another job is refused (default: the "
              "launcher's; docs/rendezvous.md)",
       .ownRule = true},
      {.field = &C::rendezvousTimeoutSeconds, .attribute = "rendezvous_timeout_seconds",
       .variable = "CERAR_RENDEZVOUS_TIMEOUT_SECONDS", .kind = kRank,
       .why = "limits the wait for the store and rank 0's settings (0: timeout_seconds)"},
      {.field = &C::rendezvousScope, .attribute = "rendezvous_scope",
       .variable = "CERAR_RENDEZVOUS_SCOPE", .kind = kRank,
       .why = "names the keys of this start in the store; every rank of a start passes the "
              "same (cerarrun's elastic generations); empty: the rank's count of starts"},
      {.field = &C::hostStore, .attribute = "host_store", .variable = "CERAR_HOST_STORE",
       .kind = kRank,
       .why = "who serves the store is decided before it exists (default: rank 0 under "
              "torchrun, Open MPI and SLURM, the launcher under cerarrun)"},
      {.field = &C::iface, .attribute = "iface", .variable = "CERAR_IFACE",
       .aliases = {"GLOO_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE"}, .kind = kRank,
       .why = "each host names its own interfaces (a list: the first is used; none: the route "
              "to the rendezvous host)",
       .ownRule = true,
       .flag = {.name = "network-interfaces",
                .help = "interface of every rank's data links (CERAR_IFACE; the first is used; "
                        "default: the route to the rendezvous host)",
                .metavar = "IFACE[,IFACE]"}},
      {.field = &C::logLevel, .attribute = "log_level", .variable = "CERAR_LOG_LEVEL",
       .aliases = {"HOROVOD_LOG_LEVEL"}, .kind = kRank,
       .why = "local output: trace, debug, info, warning, error or fatal"},
      {.field = &C::timeline, .attribute = "timeline", .variable = "CERAR_TIMELINE",
       .aliases = {"HOROVOD_TIMELINE"}, .kind = kRank,
       .why = "a local file (`{rank}` is replaced by the rank; without it rank 0 alone writes; "
              "docs/timeline.md)",
       .flag = {.name = "timeline", .help = "chrome trace file (CERAR_TIMELINE)"}},
      {.field = &C::timelineMarkCycles, .attribute = "timeline_mark_cycles",
       .variable = "CERAR_TIMELINE_MARK_CYCLES", .aliases = {"HOROVOD_TIMELINE_MARK_CYCLES"},
       .kind = kRank, .why = "local output: a CYCLE_START mark in the timeline at each cycle"},
      {.field = &C::metricsPort, .attribute = "metrics_port", .variable = "CERAR_METRICS_PORT",
       .kind = kRank,
       .why = "local output: Prometheus metrics on this port plus the local rank, `/metrics` "
              "(0: none; docs/metrics.md)",
       .low = 0, .high = 65535,
       .flag = {.name = "metrics-port",
                .help = "serve each rank's Prometheus metrics on PORT + local rank "
                        "(CERAR_METRICS_PORT; 0 = off)",
                .metavar = "PORT"}},
  };
}

// One variable into one field, by the field's type.
void readVariable(const Env& env, const Setting& s, const char* name, RuntimeConfig& c) {
  std::visit(
      [&](auto member) {
        auto& value = c.*member;
        using T = std::remove_reference_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (auto text = env.text(name)) value = *text;
        } else if constexpr (std::is_same_v<T, bool>) {
          value = env.flag(name, value);
        } else if constexpr (std::is_same_v<T, double>) {
          value = env.number(name, value, double(s.low));
        } else {
          value = T(env.integer(name, (long long)value, s.low, s.high));
        }
      },
      s.field);
}

const char* firstSet(const Env& env, const std::vector<const char*>& names) {
  for (const char* name : names) {
    if (env.has(name)) return name;
  }
  return nullptr;
}

bool sameValue(const Setting& s, const RuntimeConfig& a, const RuntimeConfig& b) {
  return std::visit([&](auto member) { return a.*member == b.*member; }, s.field);
}

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = makeSettings();
  return table;
}

const Setting& settingOf(const std::string& variable) {
  for (const Setting& s : settings()) {
    if (variable == s.variable) return s;
  }
  throw InternalError("no setting " + variable);
}

const char* settingType(const Setting& setting) {
  static const char* const kNames[] = {"integer", "integer", "number", "flag", "text"};
  return kNames[setting.field.index()];
}

std::string choiceList(const Setting& setting) {
  std::string out;
  const size_t n = setting.choices.size();
  for (size_t i = 0; i < n; ++i) {
    out += i == 0 ? "" : (i + 1 == n ? " or " : ", ");
    out += setting.choices[i];
  }
  if (setting.list) out += " (or a comma-separated list of them)";
  return out;
}

std::vector<std::string> splitList(const std::string& value) {
  std::vector<std::string> items;
  size_t from = 0;
  for (;;) {
    const size_t comma = value.find(',', from);
    items.push_back(value.substr(from, comma == std::string::npos ? comma : comma - from));
    if (comma == std::string::npos) return items;
    from = comma + 1;
  }
}

std::optional<std::string> aliasValue(const std::string& alias, const std::string& value) {
  if (alias == "HOROVOD_LOG_LEVEL") {
    std::string level;
    try {
      level = logLevelName(parseLogLevel(value));
    } catch (const Error& e) {
      throw InvalidArgumentError(alias + ": " + e.what());
    }
    if (level == "trace") return "debug";
    if (level == "fatal") return "error";
    return level;
  }
  if (alias == "HOROVOD_STALL_CHECK_DISABLE") {
    // Disabling the check is a check time of 0; 0 (the check on) leaves the time as it is.
    const Env one([&value](const std::string&) { return std::optional<std::string>(value); });
    if (one.flag(alias, false)) return "0";
    return std::nullopt;
  }
  return value;
}

std::string bothSetWarning(const Env& env, const char* variable, const char* alias) {
  return detail::concat(variable, "=", *env.text(variable), " and ", alias, "=",
                        *env.text(alias), " are both set: ", variable, " wins");
}

std::vector<std::string> readSettings(const Env& env, RuntimeConfig& config) {
  // The aliases through aliasValue, so that readVariable sees them in their variables' units.
  const Env aliases([&env](const std::string& name) -> std::optional<std::string> {
    auto value = env.text(name);
    return value ? aliasValue(name, *value) : value;
  });
  std::vector<std::string> warnings;
  for (const Setting& s : settings()) {
    if (s.ownRule) continue;
    // The last alias first and the variable last, so that the variable wins.
    for (auto alias = s.aliases.rbegin(); alias != s.aliases.rend(); ++alias) {
      readVariable(aliases, s, *alias, config);
    }
    const RuntimeConfig fromAlias = config;
    readVariable(env, s, s.variable, config);
    const char* alias = firstSet(aliases, s.aliases);
    if (alias != nullptr && env.has(s.variable) && !sameValue(s, fromAlias, config)) {
      warnings.push_back(bothSetWarning(env, s.variable, alias));
    }
  }
  return warnings;
}

}  // namespace cerar
