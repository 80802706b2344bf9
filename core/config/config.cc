#include "core/config/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>

#include "common/env.h"
#include "core/log.h"
#include "rendezvous/data_address.h"
#include "rendezvous/host_list.h"
#include "core/config/settings.h"
#include "core/config/variable_names.h"
#include "ops/algorithms/plan.h"
#include "common/error.h"

namespace cerar {
namespace {

constexpr long long kMaxRanks = 1 << 20;

// The rendezvous address for launchers that do not provide one: loopback suffices when every
// rank is on this node.
std::string addressOrLoopback(const Env& env, const RuntimeConfig& c, const char* launcher) {
  if (auto addr = env.text("CERAR_RENDEZVOUS_ADDR")) return *addr;
  if (c.localSize == c.size) return "127.0.0.1";
  throw InvalidArgumentError(std::string("CERAR_RENDEZVOUS_ADDR is not set: under ") +
                             launcher + " across nodes it must name the host of rank 0, which "
                             "the launcher's variables do not (e.g. mpirun -x "
                             "CERAR_RENDEZVOUS_ADDR=node1 -x CERAR_SECRET ...)");
}

// srun's variables: the step's node list (SLURM_STEP_NODELIST, host-list grammar) names the
// rendezvous host, its first node, where rank 0 runs under srun's block and cyclic
// distributions; this node's task count (SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID) is the
// local size.
void readSlurm(const Env& env, RuntimeConfig& c) {
  c.size = int(env.required("SLURM_NTASKS", 1, kMaxRanks));
  c.rank = int(env.required("SLURM_PROCID", 0, c.size - 1));
  std::vector<std::string> hosts;
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (auto list = env.text(name)) {
      try {
        hosts = expandHostList(*list);
      } catch (const Error& e) {
        throw InvalidArgumentError(std::string(name) + ": " + e.what());
      }
      break;
    }
  }
  long long nodes = hosts.empty() ? 1 : (long long)hosts.size();
  nodes = env.integer("SLURM_NNODES", nodes, 1, kMaxRanks);
  nodes = env.integer("SLURM_STEP_NUM_NODES", nodes, 1, kMaxRanks);
  const long long node = env.integer("SLURM_NODEID", -1, 0, kMaxRanks);
  long long local = env.integer("SLURM_NTASKS_PER_NODE", (c.size + nodes - 1) / nodes, 1, c.size);
  if (auto counts = env.text("SLURM_STEP_TASKS_PER_NODE"); counts && node >= 0) {
    const std::vector<int> perNode = expandTasksPerNode(*counts);
    if (size_t(node) < perNode.size()) local = perNode[size_t(node)];
  }
  c.localSize = nodes == 1 ? c.size : int(std::min<long long>(std::max(local, 1ll), c.size));
  c.localRank = int(env.integer("SLURM_LOCALID", c.rank % c.localSize, 0, c.localSize - 1));
  if (auto addr = env.text("CERAR_RENDEZVOUS_ADDR")) {
    c.rendezvousAddr = *addr;
  } else if (c.localSize == c.size) {
    c.rendezvousAddr = "127.0.0.1";
  } else if (!hosts.empty()) {
    c.rendezvousAddr = hosts.front();
  } else {
    throw InvalidArgumentError(
        "under srun across nodes the rendezvous host is the first of SLURM_STEP_NODELIST, "
        "which is not set; set CERAR_RENDEZVOUS_ADDR to the host of rank 0");
  }
  // A port derived from the job id keeps concurrent jobs on one node apart.
  const long long job = env.integer("SLURM_JOB_ID", 0, 0, (1ll << 62));
  c.rendezvousPort = int(env.integer("CERAR_RENDEZVOUS_PORT", 20000 + job % 20000, 1, 65535));
  c.hostStore = true;
}

void readIdentity(const Env& env, RuntimeConfig& c) {
  if (env.has("CERAR_RANK")) {  // cerarrun: the launcher hosts the store
    c.size = int(env.required("CERAR_SIZE", 1, kMaxRanks));
    c.rank = int(env.required("CERAR_RANK", 0, c.size - 1));
    c.localSize = int(env.integer("CERAR_LOCAL_SIZE", c.size, 1, c.size));
    c.localRank = int(env.integer("CERAR_LOCAL_RANK", c.rank % c.localSize, 0, c.localSize - 1));
    c.rendezvousAddr = env.text("CERAR_RENDEZVOUS_ADDR").value_or("127.0.0.1");
    c.rendezvousPort = int(env.integer("CERAR_RENDEZVOUS_PORT", 0, 0, 65535));
    c.hostStore = false;
    // cerarrun sets CERAR_JOB_ID (read below); its fresh secret tells jobs apart as well.
  } else if (env.has("RANK") && env.has("WORLD_SIZE")) {  // torchrun
    c.size = int(env.required("WORLD_SIZE", 1, kMaxRanks));
    c.rank = int(env.required("RANK", 0, c.size - 1));
    // A Kubernetes PyTorchJob runs one process per pod and sets no LOCAL_*: with a MASTER_ADDR
    // that is not loopback, a rank without LOCAL_WORLD_SIZE is alone on its host.
    const auto masterAddr = env.text("MASTER_ADDR");
    const bool alone = masterAddr && !isLoopbackAddress(*masterAddr);
    c.localSize = int(env.integer("LOCAL_WORLD_SIZE", alone ? 1 : c.size, 1, c.size));
    c.localRank = int(env.integer("LOCAL_RANK", c.rank % c.localSize, 0, c.localSize - 1));
    c.rendezvousAddr = env.text("CERAR_RENDEZVOUS_ADDR")
                           .value_or(env.text("MASTER_ADDR").value_or("127.0.0.1"));
    const long long master = env.integer("MASTER_PORT", 29500, 1, 65534);
    c.rendezvousPort =
        int(env.integer("CERAR_RENDEZVOUS_PORT", master + kTorchrunPortOffset, 1, 65535));
    c.hostStore = true;
    // torchrun's run (its --rdzv-id; a fresh one under --standalone) at its master. RANK and
    // WORLD_SIZE set by hand name no run: no identity then.
    if (auto run = env.text("TORCHELASTIC_RUN_ID")) {
      c.jobId = detail::concat("torchrun run ", *run, " at ",
                               env.text("MASTER_ADDR").value_or("127.0.0.1"), ":", master);
    }
  } else if (env.has("OMPI_COMM_WORLD_RANK")) {  // mpirun (Open MPI)
    c.size = int(env.required("OMPI_COMM_WORLD_SIZE", 1, kMaxRanks));
    c.rank = int(env.required("OMPI_COMM_WORLD_RANK", 0, c.size - 1));
    c.localSize = int(env.integer("OMPI_COMM_WORLD_LOCAL_SIZE", c.size, 1, c.size));
    c.localRank =
        int(env.integer("OMPI_COMM_WORLD_LOCAL_RANK", c.rank % c.localSize, 0, c.localSize - 1));
    c.rendezvousAddr = addressOrLoopback(env, c, "mpirun");
    c.rendezvousPort =
        int(env.integer("CERAR_RENDEZVOUS_PORT", kDefaultRendezvousPort, 1, 65535));
    c.hostStore = true;
    // The job's PMIx namespace (Open MPI 4 and 5), else its job id (Open MPI 4's ess).
    for (const char* name :
         {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"}) {
      if (auto job = env.text(name)) {
        c.jobId = detail::concat("Open MPI job ", *job);
        break;
      }
    }
  } else if (env.has("SLURM_PROCID")) {  // srun
    readSlurm(env, c);
    if (auto job = env.text("SLURM_JOB_ID")) {
      c.jobId = detail::concat("SLURM job ", *job, " step ",
                               env.text("SLURM_STEP_ID").value_or("?"));
    }
  }
  if (auto job = env.text("CERAR_JOB_ID"); job && !job->empty()) c.jobId = *job;
}

// CERAR_IFACE, else an alias that the same job's other libraries honour (torch's, Horovod's).
// The value may list several interfaces ("eth0,eth1"); the data links use the first. A
// disagreeing alias beside CERAR_IFACE adds a warning to `warnings`, as readSettings does.
void readInterface(const Env& env, RuntimeConfig& c, std::vector<std::string>& warnings) {
  const Setting& iface = settingOf("CERAR_IFACE");
  std::vector<const char*> names{iface.variable};
  names.insert(names.end(), iface.aliases.begin(), iface.aliases.end());
  for (const char* name : names) {
    if (auto value = env.text(name)) {
      c.iface = value->substr(0, value->find(','));
      c.ifaceVariable = name;
      break;
    }
  }
  if (c.ifaceVariable != iface.variable) return;
  for (const char* alias : iface.aliases) {
    if (!env.has(alias)) continue;
    if (env.text(alias) != env.text(iface.variable)) {
      warnings.push_back(bothSetWarning(env, iface.variable, alias));
    }
    return;
  }
}

// A text setting with a fixed set of values: one of its row's choices.
void checkChoice(const std::string& variable, const std::string& value) {
  const Setting& setting = settingOf(variable);
  const auto valid = [&](const std::string& item) {
    for (const char* choice : setting.choices) {
      if (item == choice) return true;
    }
    return false;
  };
  const std::vector<std::string> items =
      setting.list ? splitList(value) : std::vector<std::string>{value};
  if (!items.empty() && std::all_of(items.begin(), items.end(), valid)) return;
  throw InvalidArgumentError(detail::concat(variable, " must be ", choiceList(setting),
                                            ", got '", value, "'"));
}

}  // namespace

RuntimeConfig configFromEnvironment(const EnvironmentLookup& lookup) {
  const Env env(lookup);
  RuntimeConfig c;
  readIdentity(env, c);
  std::vector<std::string> conflicts = readSettings(env, c);
  readInterface(env, c, conflicts);
  try {
    validateConfig(c);
  } catch (const Error& e) {
    throw InvalidArgumentError(std::string("cerar configuration from the environment: ") +
                               e.what());
  }
  const Logger logger(c.rank, parseLogLevel(c.logLevel));
  for (const std::string& conflict : conflicts) warnOnce(logger, conflict);
  // A store this rank hosts follows the secret policy at start (storeEndpointOf); one hosted
  // elsewhere without a secret is someone's deliberate choice, but worth a warning.
  if (c.secret.empty() && c.size > 1 && !c.hostStore) {
    logger.log(LogLevel::kWarning,
               "CERAR_SECRET is not set: the rendezvous store admits any client that knows its "
               "address");
  }
  return c;
}

// The process's own environment can also be listed: rank 0 (one voice for the job) names the
// variables that have no effect.
RuntimeConfig RuntimeConfig::fromEnvironment() {
  RuntimeConfig c = configFromEnvironment(processEnvironment());
  if (c.rank == 0) {
    const Logger logger(c.rank, parseLogLevel(c.logLevel));
    for (const std::string& warning : environmentWarnings(processVariableNames())) {
      warnOnce(logger, warning);
    }
  }
  return c;
}

namespace {
bool isLoopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

bool isPrivateDirectory(const std::string& dir) {
  struct stat info {};
  return lstat(dir.c_str(), &info) == 0 && S_ISDIR(info.st_mode) && info.st_uid == getuid() &&
         (info.st_mode & 077) == 0;
}

// $XDG_RUNTIME_DIR when it is private, else /tmp/cerar-<uid>: a directory of this user that
// nobody else may enter, checked rather than trusted (another user could have made
// /tmp/cerar-<uid> first). Every rank of the host decides alike.
std::string privateDirectory(int rank) {
  const char* runtimeDir = std::getenv("XDG_RUNTIME_DIR");
  if (runtimeDir != nullptr && *runtimeDir != '\0' && isPrivateDirectory(runtimeDir)) {
    return runtimeDir;
  }
  const std::string dir = detail::concat("/tmp/cerar-", getuid());
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw Error(detail::concat("cerar: rank ", rank, ": cannot create ", dir, ": ",
                               std::strerror(errno)));
  }
  if (!isPrivateDirectory(dir)) {
    throw Error(detail::concat("cerar: rank ", rank, ": ", dir, " is not a directory that only "
                               "this user can open (mode 0700); remove it, or set CERAR_SECRET"));
  }
  return dir;
}
}  // namespace

// "-" and 12 hex digits of the job identity's FNV-1a hash (a name, not a secret); none without one.
static std::string jobSuffix(const std::string& jobId) {
  if (jobId.empty()) return "";
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char ch : jobId) hash = (hash ^ ch) * 1099511628211ull;
  char text[16];
  std::snprintf(text, sizeof text, "-%012llx", (unsigned long long)(hash >> 16));
  return text;
}

StoreEndpoint storeEndpointOf(const RuntimeConfig& config) {
  const std::string& addr = config.rendezvousAddr;
  if (!config.secret.empty() || !config.hostStore) {
    return StoreEndpoint{isLoopback(addr) ? addr : "0.0.0.0", addr};
  }
  if (config.localSize < config.size) {
    throw InvalidArgumentError(detail::concat(
        "cerar: rank ", config.rank, ": the rendezvous store (", addr, ":",
        config.rendezvousPort, ") must be reachable from other hosts and CERAR_SECRET is not "
        "set; set one in the job script, e.g. export CERAR_SECRET=$(openssl rand -hex 16) "
        "(mpirun, srun and torchrun pass it to every rank)"));
  }
  // Jobs known apart by their launchers' identities get sockets of their own even on one port.
  const std::string socket =
      detail::concat("unix:", privateDirectory(config.rank), "/cerar-store-",
                     config.rendezvousPort, jobSuffix(config.jobId), ".sock");
  return StoreEndpoint{socket, socket};
}

std::chrono::milliseconds timeoutOf(const RuntimeConfig& config) {
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::ceil(config.timeoutSeconds * 1000)));
}

std::chrono::milliseconds rendezvousTimeoutOf(const RuntimeConfig& config) {
  const double seconds = config.rendezvousTimeoutSeconds > 0 ? config.rendezvousTimeoutSeconds
                                                             : config.timeoutSeconds;
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

void validateConfig(const RuntimeConfig& c) {
  CERAR_CHECK_ARGUMENT(c.size >= 1, "size must be >= 1, got ", c.size);
  CERAR_CHECK_ARGUMENT(c.rank >= 0 && c.rank < c.size, "rank ", c.rank, " out of range for size ",
                       c.size);
  CERAR_CHECK_ARGUMENT(c.localSize >= 1 && c.localRank >= 0 && c.localRank < c.localSize,
                       "local rank ", c.localRank, " out of range for local size ", c.localSize);
  CERAR_CHECK_ARGUMENT(c.rendezvousPort >= 0 && c.rendezvousPort <= 65535, "rendezvous port ",
                       c.rendezvousPort, " out of range");
  CERAR_CHECK_ARGUMENT(c.cycleTimeMs > 0 && std::isfinite(c.cycleTimeMs),
                       "CERAR_CYCLE_TIME must be positive, got ", c.cycleTimeMs);
  checkChoice("CERAR_DEVICE_TRANSPORT", c.deviceTransport);
  checkChoice("CERAR_COMPRESSION", c.compression);
  CERAR_CHECK_ARGUMENT(splitList(c.compression).size() == 1 ||
                           (c.maxError > 0 && c.algorithm == "auto"),
                       "CERAR_COMPRESSION='", c.compression, "' lists the wires an error budget "
                       "may choose: it needs CERAR_MAX_ERROR (and CERAR_ALGORITHM=auto)");
  checkChoice("CERAR_ERROR_BOUND", c.errorBound);
  CERAR_CHECK_ARGUMENT(c.maxError >= 0 && std::isfinite(c.maxError),
                       "CERAR_MAX_ERROR must be >= 0 (0: no budget), got ", c.maxError);
  checkChoice("CERAR_ALGORITHM", c.algorithm);
  checkChoice("CERAR_HIERARCHICAL_ALLREDUCE", c.hierarchicalAllreduce);
  if (c.components != 0 && c.size > 1) {
    const Status invalid = validateCerarParameters(c.size, c.components);
    CERAR_CHECK_ARGUMENT(invalid.ok(), "CERAR_COMPONENTS=", c.components, ": ", invalid.message);
  }
  CERAR_CHECK_ARGUMENT(c.components >= 0, "CERAR_COMPONENTS must be >= 0, got ", c.components);
  CERAR_CHECK_ARGUMENT(c.eps >= 0 && std::isfinite(c.eps), "CERAR_EPS must be >= 0, got ", c.eps);
  CERAR_CHECK_ARGUMENT(c.componentsScale > 0 && std::isfinite(c.componentsScale),
                       "CERAR_COMPONENTS_SCALE must be positive, got ", c.componentsScale);
  CERAR_CHECK_ARGUMENT(c.stallCheckSeconds >= 0 && c.stallShutdownSeconds >= 0,
                       "stall times must be >= 0");
  CERAR_CHECK_ARGUMENT(c.timeoutSeconds > 0 && std::isfinite(c.timeoutSeconds),
                       "CERAR_TIMEOUT_SECONDS must be positive, got ", c.timeoutSeconds);
  CERAR_CHECK_ARGUMENT(c.rendezvousTimeoutSeconds >= 0 && std::isfinite(c.rendezvousTimeoutSeconds),
                       "CERAR_RENDEZVOUS_TIMEOUT_SECONDS must be >= 0, got ",
                       c.rendezvousTimeoutSeconds);
  CERAR_CHECK_ARGUMENT(c.autotuneWarmupSamples >= 0,
                       "CERAR_AUTOTUNE_WARMUP_SAMPLES must be >= 0, got ", c.autotuneWarmupSamples);
  CERAR_CHECK_ARGUMENT(c.autotuneStepsPerSample >= 1,
                       "CERAR_AUTOTUNE_STEPS_PER_SAMPLE must be >= 1, got ",
                       c.autotuneStepsPerSample);
  parseLogLevel(c.logLevel);
}

}  // namespace cerar
