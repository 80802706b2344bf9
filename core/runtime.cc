#include "core/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "core/arguments.h"
#include "core/config.h"
#include "core/coordinator.h"
#include "core/device.h"
#include "core/device_queue.h"
#include "core/job_config.h"
#ifndef CERAR_NO_GLOO
#include "core/rendezvous/data_address.h"
#include "core/rendezvous/tcp_store.h"
#include "ops/transport/gloo_tcp.h"
#endif
#include "core/scaling.h"
#include "ops/algorithms/adasum.h"
#include "ops/common/error.h"
#include "ops/collectives.h"
#include "ops/transport/inproc.h"

namespace cerar {

size_t Tensor::elements() const { return shapeElements(shape); }
size_t Tensor::bytes() const { return elements() * dtypeSize(dtype); }

// --- Handle -----------------------------------------------------------------------------

Handle::Handle(std::shared_ptr<OperationState> state) : state_(std::move(state)) {}

namespace {
OperationState& stateOf(const std::shared_ptr<OperationState>& state) {
  if (!state) throw InvalidArgumentError("cerar: empty handle (not returned by an operation)");
  return *state;
}
}  // namespace

bool Handle::poll() const {
  auto& s = stateOf(state_);
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.done;
}

void Handle::wait() const {
  auto& s = stateOf(state_);
  std::unique_lock<std::mutex> lock(s.mutex);
  s.ended.wait(lock, [&] { return s.done; });
  if (!s.status.ok()) s.status.raise();
}

bool Handle::waitFor(std::chrono::milliseconds limit) const {
  auto& s = stateOf(state_);
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.ended.wait_for(lock, limit, [&] { return s.done; })) return false;
  if (!s.status.ok()) s.status.raise();
  return true;
}

const std::vector<std::byte>& Handle::output() const { return stateOf(state_).output; }
const std::vector<int64_t>& Handle::outputShape() const { return stateOf(state_).outputShape; }
const std::vector<int64_t>& Handle::receivedSplits() const {
  return stateOf(state_).receivedSplits;
}
int Handle::lastJoinedRank() const { return stateOf(state_).lastJoinedRank; }
int32_t Handle::processSetId() const { return stateOf(state_).processSetId; }

// --- the runtime ------------------------------------------------------------------------

namespace {

// "{rank}" in a timeline path becomes the rank; without it only rank 0 writes, so that ranks
// sharing a file system do not write one file at once.
std::string timelinePath(const std::string& path, int rank) {
  const auto at = path.find("{rank}");
  if (at != std::string::npos) {
    return path.substr(0, at) + std::to_string(rank) + path.substr(at + 6);
  }
  return rank == 0 ? path : "";
}

class RuntimeImpl final : public Runtime {
 public:
  // `config` holds the job-wide settings every rank agreed on (core/job_config.h).
  RuntimeImpl(const RuntimeConfig& config, std::shared_ptr<Transport> transport,
              std::shared_ptr<void> rendezvous, std::shared_ptr<BlameBoard> board = nullptr,
              std::function<void()> beforeRelease = {})
      : config_(config), transport_(std::move(transport)), rendezvous_(std::move(rendezvous)),
        logger_(transport_->rank(), parseLogLevel(config.logLevel), config.logSink),
        timeline_(transport_->rank()),
        sets_(transport_->size()),
        devices_(config_.deviceOps, deviceSetup(config_, transport_)),
        coordinator_(config_, transport_, queue_, timeline_, logger_, devices_, sets_,
                     std::move(beforeRelease)) {
    if (!config_.timeline.empty()) startTimeline(config_.timeline);
    coordinator_.setBlameBoard(std::move(board), config_.hostStore);
    coordinator_.probe();
    thread_ = std::thread([this] { coordinator_.run(); });
    coordinatorId_ = thread_.get_id();  // before any operation exists to call back
  }
  ~RuntimeImpl() override { shutdown(); }

  void shutdown() override {
    queue_.requestShutdown();
    // From a callback (the coordinator or finalizer thread): the request suffices; the thread
    // ends after this cycle and is joined by a later shutdown() or the destructor.
    if (std::this_thread::get_id() == coordinatorId_ || coordinator_.onFinalizerThread()) return;
    std::lock_guard<std::mutex> lock(shutdownMutex_);
    if (!thread_.joinable()) return;
    thread_.join();
    timeline_.stop();
  }

  int rank() const override { return transport_->rank(); }
  int size() const override { return transport_->size(); }
  int localRank() const override { return config_.localRank; }
  int localSize() const override { return config_.localSize; }

  Handle allreduce(const std::string& name, Tensor input, Tensor output, Op op, double prescale,
                   double postscale, Callback callback, Wire wire, int32_t processSet) override {
    return groupedAllreduce({name}, {std::move(input)}, {std::move(output)}, op, prescale,
                            postscale, std::move(callback), wire, processSet);
  }

  Handle groupedAllreduce(const std::vector<std::string>& names, std::vector<Tensor> inputs,
                          std::vector<Tensor> outputs, Op op, double prescale, double postscale,
                          Callback callback, Wire wire, int32_t processSet) override {
    auto [entry, invalid] = reductionEntry(Kind::kAllreduce, names, std::move(inputs),
                                           std::move(outputs), op, prescale, postscale,
                                           processSet);
    entry->request.description.wire = wire;
    return enqueue(std::move(entry), invalid, std::move(callback));
  }

  Handle reducescatter(const std::vector<std::string>& names, std::vector<Tensor> inputs,
                       std::vector<Tensor> outputs, Op op, double prescale, double postscale,
                       Callback callback, int32_t processSet) override {
    auto [entry, invalid] = reductionEntry(Kind::kReducescatter, names, std::move(inputs),
                                           std::move(outputs), op, prescale, postscale,
                                           processSet);
    return enqueue(std::move(entry), invalid, std::move(callback));
  }

  Handle alltoall(const std::string& name, Tensor input, std::vector<int64_t> splits,
                  Callback callback, int32_t processSet) override {
    auto entry = singleTensorEntry(Kind::kAlltoall, name, input, processSet);
    const auto set = sets_.find(processSet);
    Status invalid = checkMember(set, processSet, rank(), "alltoall of '" + name + "'");
    const int n = set ? set->size() : 1;
    if (invalid.ok()) invalid = checkNames({name}, "alltoall");
    if (invalid.ok()) invalid = checkTensor(name, input);
    if (invalid.ok() && input.shape.empty()) {
      invalid = argumentError("alltoall of '" + name +
                              "': a scalar has no first dimension to split");
    }
    const int64_t rows = input.shape.empty() ? 0 : input.shape[0];
    if (invalid.ok() && splits.empty()) {
      if (rows % n != 0) {
        invalid = argumentError(detail::concat(
            "alltoall of '", name, "': without splits the first dimension (", rows,
            ") must be a multiple of the number of ranks (", n, ")"));
      }
      splits.assign(n, rows / n);
    }
    if (invalid.ok() && int(splits.size()) != n) {
      invalid = argumentError(detail::concat("alltoall of '", name, "': ", splits.size(),
                                             " splits for ", n, " ranks"));
    }
    int64_t total = 0;
    for (int64_t rowsTo : splits) {
      if (invalid.ok() && rowsTo < 0) {
        invalid = argumentError("alltoall of '" + name + "': a negative split");
      }
      total += rowsTo;
    }
    if (invalid.ok() && total > rows) {
      invalid = argumentError(detail::concat("alltoall of '", name, "': the splits sum to ",
                                             total, ", more than the first dimension (", rows,
                                             ")"));
    }
    entry->request.description.splits = std::move(splits);
    return enqueue(std::move(entry), invalid, std::move(callback));
  }

  Handle allgather(const std::string& name, Tensor input, Callback callback,
                   int32_t processSet) override {
    return groupedAllgather({name}, {std::move(input)}, std::move(callback), processSet);
  }

  Handle groupedAllgather(const std::vector<std::string>& names, std::vector<Tensor> inputs,
                          Callback callback, int32_t processSet) override {
    auto entry = std::make_unique<Entry>();
    entry->request.names = names;
    Description& d = entry->request.description;
    d.kind = Kind::kAllgather;
    d.processSet = processSet;
    Status invalid = checkMember(sets_.find(processSet), processSet, rank(),
                                 "allgather of '" + (names.empty() ? "" : names[0]) + "'");
    if (invalid.ok()) invalid = checkNames(names, "allgather");
    if (invalid.ok() && inputs.size() != names.size()) {
      invalid = argumentError(detail::concat("grouped allgather: ", names.size(), " names and ",
                                             inputs.size(), " inputs"));
    }
    for (size_t i = 0; invalid.ok() && i < inputs.size(); ++i) {
      const Tensor& in = inputs[i];
      if (i == 0) d.dtype = in.dtype, d.onDevice = in.device >= 0;
      invalid = checkTensor(names[i], in);
      if (invalid.ok() && in.shape.empty()) {
        invalid = argumentError("allgather of '" + names[i] +
                                "': a scalar has no first dimension to concatenate");
      } else if (invalid.ok() && (in.dtype != d.dtype || in.device != inputs[0].device)) {
        invalid = argumentError("grouped allgather: '" + names[i] + "' differs in dtype or "
                                "device from '" + names[0] + "'; a group is one unit");
      }
      d.shapes.push_back(in.shape);
    }
    entry->inputs = inputs;
    entry->outputs = std::move(inputs);
    return enqueue(std::move(entry), invalid, std::move(callback));
  }

  Handle broadcast(const std::string& name, Tensor tensor, int root, Callback callback,
                   int32_t processSet) override {
    auto entry = singleTensorEntry(Kind::kBroadcast, name, tensor, processSet);
    entry->request.description.root = root;
    const auto set = sets_.find(processSet);
    Status invalid = checkMember(set, processSet, rank(), "broadcast of '" + name + "'");
    if (invalid.ok()) invalid = checkNames({name}, "broadcast");
    if (invalid.ok()) invalid = checkTensor(name, tensor);
    if (invalid.ok() && (root < 0 || root >= size())) {
      invalid = argumentError(detail::concat("broadcast of '", name, "': root ", root,
                                             " out of range for ", size(), " ranks"));
    } else if (invalid.ok() && !set->contains(root)) {
      invalid = argumentError(detail::concat("broadcast of '", name, "': root ", root,
                                             " is not in process set ", processSet));
    }
    return enqueue(std::move(entry), invalid, std::move(callback));
  }

  Handle barrier(Callback callback, int32_t processSet) override {
    auto entry = std::make_unique<Entry>();
    entry->request.names = {"cerar.barrier"};
    entry->request.description.kind = Kind::kBarrier;
    entry->request.description.processSet = processSet;
    const Status invalid = checkMember(sets_.find(processSet), processSet, rank(), "barrier");
    return enqueue(std::move(entry), invalid, std::move(callback));
  }

  Handle addProcessSet(std::vector<int> ranks, Callback callback) override {
    std::sort(ranks.begin(), ranks.end());
    auto entry = processSetChange();
    entry->request.description.splits.assign(ranks.begin(), ranks.end());
    const Status invalid = checkSetRanks(ranks, size());
    return enqueue(std::move(entry), invalid, std::move(callback));
  }

  Handle removeProcessSet(int32_t id, Callback callback) override {
    auto entry = processSetChange();
    entry->request.description.root = id;
    const Status invalid = id > 0 ? Status() : argumentError(detail::concat(
        "process set ", id, " cannot be removed (0 is every rank; others count from 1)"));
    return enqueue(std::move(entry), invalid, std::move(callback));
  }

  std::optional<std::vector<int>> processSetRanks(int32_t id) const override {
    const auto set = sets_.find(id);
    if (!set) return std::nullopt;
    return set->ranks;
  }
  std::vector<int32_t> processSetIds() const override { return sets_.ids(); }
  bool dynamicProcessSets() const override { return config_.dynamicProcessSets; }

  Handle join(Callback callback) override {
    auto state = std::make_shared<OperationState>();
    state->callback = std::move(callback);
    const Status refused = queue_.pushJoin(state);
    if (!refused.ok()) state->complete(refused);
    return Handle(state);
  }

  void startTimeline(const std::string& path) override {
    const std::string mine = timelinePath(path, rank());
    if (!mine.empty()) timeline_.start(mine);
  }
  void stopTimeline() override { timeline_.stop(); }
  RuntimeStats stats() const override {
    RuntimeStats stats = coordinator_.stats();
    if (storeTraffic_) storeTraffic_(stats);
    return stats;
  }
  // Adds the rendezvous store's counters to stats(); set once, before any thread reads them.
  void setStoreTraffic(std::function<void(RuntimeStats&)> traffic) {
    storeTraffic_ = std::move(traffic);
  }

 private:
  // A grouped allreduce or reducescatter in `processSet`: its entry, and why it is refused
  // (ok: it is not).
  std::pair<std::unique_ptr<Entry>, Status> reductionEntry(
      Kind kind, const std::vector<std::string>& names, std::vector<Tensor> inputs,
      std::vector<Tensor> outputs, Op op, double prescale, double postscale,
      int32_t processSet) {
    auto entry = std::make_unique<Entry>();
    entry->request.names = names;
    Description& d = entry->request.description;
    d.kind = kind;
    d.op = op;
    d.prescale = prescale;
    d.postscale = postscale;
    d.processSet = processSet;
    const bool scatter = kind == Kind::kReducescatter;
    const char* what = scatter ? "reducescatter" : "allreduce";
    const auto set = sets_.find(processSet);
    Status invalid = checkMember(set, processSet, rank(), detail::concat(
        what, " of '", names.empty() ? std::string() : names.front(), "'"));
    if (invalid.ok()) {
      invalid = checkReduction(names, inputs, outputs, d, set->rankOf(rank()), set->size());
    }
    if (invalid.ok() && scatter && op == Op::kAdasum) {
      invalid = argumentError("reducescatter of '" + names.front() +
                              "': Adasum is an all-reduce only");
    }
    if (invalid.ok()) {
      invalid = checkOp(names.front(), d.dtype, op, prescale, postscale, set->size(), what);
    }
    entry->inputs = std::move(inputs);
    entry->outputs = std::move(outputs);
    return {std::move(entry), invalid};
  }

  // A process set change: negotiated in set 0 under one name, so every rank applies the same
  // changes in the same order (core/process_sets.h).
  static std::unique_ptr<Entry> processSetChange() {
    auto entry = std::make_unique<Entry>();
    entry->request.names = {"cerar.process_set.change"};
    entry->request.description.kind = Kind::kProcessSet;
    return entry;
  }

  // The request of an operation on one tensor, in place (allgather's output is the handle's).
  static std::unique_ptr<Entry> singleTensorEntry(Kind kind, const std::string& name,
                                                  const Tensor& tensor, int32_t processSet) {
    auto entry = std::make_unique<Entry>();
    entry->request.names = {name};
    Description& d = entry->request.description;
    d.kind = kind;
    d.processSet = processSet;
    d.dtype = tensor.dtype;
    d.onDevice = tensor.device >= 0;
    d.shapes = {tensor.shape};
    entry->inputs = {tensor};
    entry->outputs = {tensor};
    return entry;
  }

  static DeviceSetup deviceSetup(const RuntimeConfig& config,
                                 std::shared_ptr<Transport> transport) {
    DeviceSetup setup;
    // Device work runs on the device queue's thread, beside the coordinator's on the same
    // links: it gets a channel of its own (Gloo's and the in-process transport have them).
    std::shared_ptr<Transport> channel = transport->channel(kDeviceChannelTag);
    setup.transport = channel ? std::move(channel) : std::move(transport);
    setup.transportKind = config.deviceTransport;
    setup.localRank = config.localRank;
    setup.timeout = timeoutOf(config);
    return setup;
  }

  // Device tensors: this rank's device must be usable, and the runtime's work must follow the
  // work queued on the tensors' streams so far (an event per stream, recorded now, on the
  // enqueuing thread). Returns why not.
  Status prepareDevice(Entry& entry) {
    try {
      DeviceQueue& ops = devices_.get(entry.inputs.front().device);
      std::vector<void*> streams;
      for (const Tensor& t : entry.inputs) {
        if (std::find(streams.begin(), streams.end(), t.stream) != streams.end()) continue;
        streams.push_back(t.stream);
        entry.ready.push_back(ops.ready(t.stream));
      }
      return {};
    } catch (const std::exception& e) {
      return withContext(statusOf(e), detail::concat(kindName(entry.request.description.kind),
                                                     " of '", entry.request.names.front(), "': "),
                         "");
    }
  }

  Handle enqueue(std::unique_ptr<Entry> entry, const Status& invalid, Callback callback) {
    auto state = std::make_shared<OperationState>();
    state->callback = std::move(callback);
    entry->state = state;
    entry->enqueued = Clock::now();
    Status why = invalid;
    if (why.ok() && entry->request.description.onDevice) why = prepareDevice(*entry);
    const Status refused =
        why.ok() ? queue_.push(std::move(entry)) : withContext(why, "cerar: ", "");
    if (!refused.ok()) state->complete(refused);  // the callback runs on this thread
    return Handle(state);
  }

  RuntimeConfig config_;
  std::shared_ptr<Transport> transport_;
  std::shared_ptr<void> rendezvous_;  // the store (and rank 0's server), kept for the job
  std::function<void(RuntimeStats&)> storeTraffic_;
  Logger logger_;
  Timeline timeline_;
  Queue queue_;
  ProcessSetTable sets_;
  DeviceSlot devices_;
  Coordinator coordinator_;
  std::mutex shutdownMutex_;
  std::thread thread_;
  std::thread::id coordinatorId_;
};

}  // namespace

std::unique_ptr<Runtime> Runtime::startWith(const RuntimeConfig& config,
                                            std::shared_ptr<Transport> transport) {
  CERAR_ENFORCE(transport != nullptr, "cerar: startWith needs a transport");
  RuntimeConfig adjusted = config;
  adjusted.rank = transport->rank();
  adjusted.size = transport->size();
  if (adjusted.localSize > adjusted.size || adjusted.localRank >= adjusted.localSize) {
    adjusted.localRank = 0, adjusted.localSize = 1;
  }
  validateConfig(adjusted);
  Transport& links = *transport;
  const RuntimeConfig agreed = agreeJobConfig(adjusted, [&](const std::vector<uint8_t>& mine) {
    return broadcastBytes(links, mine, 0);
  });
  return std::make_unique<RuntimeImpl>(agreed, std::move(transport), nullptr);
}

#ifndef CERAR_NO_GLOO
namespace {

// The address of this rank's data links (data_address.h), logged at info; NCCL's sockets, when
// a device transport is built, follow the same choice unless NCCL_SOCKET_IFNAME is set.
DataAddress dataAddressOf(const RuntimeConfig& config) {
  DataAddressInputs inputs;
  inputs.rank = config.rank;
  inputs.iface = config.iface;
  inputs.ifaceBy = config.ifaceVariable;
  inputs.rendezvousAddr = config.rendezvousAddr;
  inputs.peersRemote = config.localSize < config.size;
  inputs.interfaces = localInterfaces();
  DataAddress data = chooseDataAddress(inputs);
  Logger(config.rank, parseLogLevel(config.logLevel), config.logSink)
      .log(LogLevel::kInfo, "data links on " + data.reason);
  if (config.deviceOps) {
    const auto lookup = [](const std::string& name) -> std::optional<std::string> {
      const char* value = std::getenv(name.c_str());
      return value == nullptr ? std::nullopt : std::optional<std::string>(value);
    };
    for (const auto& [name, value] : ncclEnvironmentFor(data, lookup)) {
      setenv(name.c_str(), value.c_str(), 0);  // before NCCL reads it at its first init
    }
  }
  return data;
}

// Rank 0's bytes under `key` to every rank.
std::vector<uint8_t> exchangeThroughStore(TcpStore& store, const std::string& key, int rank,
                                          const std::vector<uint8_t>& mine) {
  try {
    if (rank == 0) {
      store.set(key, std::vector<char>(mine.begin(), mine.end()));
      return mine;
    }
    const std::vector<char> bytes = store.get(key);
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    throw Error(detail::concat("cerar: rank ", rank, ": the job settings from rank 0 ('", key,
                               "' at ", store.address(), ") did not arrive: ", e.what()));
  }
}

// The rendezvous store as the board where failures are posted (core/blame.h).
class StoreBoard final : public BlameBoard {
 public:
  explicit StoreBoard(std::shared_ptr<TcpStore> store) : store_(std::move(store)) {}
  void post(const std::string& key, const std::string& value,
            std::chrono::milliseconds limit) override {
    store_->set(key, std::vector<char>(value.begin(), value.end()), limit);
  }
  std::optional<std::string> read(const std::string& key,
                                  std::chrono::milliseconds limit) override {
    if (!store_->check({key}, limit)) return std::nullopt;
    auto value = store_->get(key, limit);
    return std::string(value.begin(), value.end());
  }
  void postOnLoss(const std::string& key, std::chrono::milliseconds limit) override {
    store_->setOnLoss(key, {}, limit);
  }

 private:
  std::shared_ptr<TcpStore> store_;
};

}  // namespace
#endif

std::unique_ptr<Runtime> Runtime::start(const RuntimeConfig& config) {
  validateConfig(config);
  if (config.size == 1) {
    InprocHub hub(1, timeoutOf(config));
    return std::make_unique<RuntimeImpl>(config, hub.connect(0), nullptr);
  }
#ifdef CERAR_NO_GLOO
  throw Error("cerar: this build has no Gloo; more than one rank needs Runtime::startWith");
#else
  CERAR_ENFORCE(config.rendezvousPort > 0, "cerar: rank ", config.rank, " of ", config.size,
                ": no rendezvous port (set CERAR_RENDEZVOUS_PORT)");
  // Members in this order: the store (a client) closes before rank 0's server.
  struct Rendezvous {
    std::unique_ptr<TcpStoreServer> server;
    std::shared_ptr<TcpStore> store;  // shared with the blame board
  };
  auto rendezvous = std::make_shared<Rendezvous>();
  std::unique_ptr<TcpStoreServer>& server = rendezvous->server;
  const StoreEndpoint endpoint = storeEndpointOf(config);  // the secret policy; may throw
  // Before anything is connected: a rank that cannot publish a usable address fails at once.
  const DataAddress data = dataAddressOf(config);
  if (config.hostStore && config.rank == 0) {
    server = std::make_unique<TcpStoreServer>(endpoint.listen, uint16_t(config.rendezvousPort),
                                              config.secret, StoreLimits::fromEnvironment());
    server->start();
  }
  rendezvous->store = std::make_shared<TcpStore>(endpoint.connect,
                                                 uint16_t(config.rendezvousPort), config.secret,
                                                 rendezvousTimeoutOf(config));
  TcpStore& store = *rendezvous->store;
  // This process's n-th start on this store: every rank starts as often, so the count names
  // this incarnation's keys on every rank, also on a store that outlives it (cerarrun's).
  const int64_t epoch = store.add(detail::concat("cerar/runtime/starts/", config.rank), 1);
  const std::string prefix = detail::concat("cerar/runtime/", epoch);
  const RuntimeConfig agreed = agreeJobConfig(config, [&](const std::vector<uint8_t>& mine) {
    return exchangeThroughStore(store, prefix + "/job-settings", config.rank, mine);
  });
  GlooOptions options;
  if (data.named) {
    options.iface = data.iface;
  } else {
    options.hostname = data.address;
  }
  options.timeout = timeoutOf(agreed);
  options.prefix = prefix + "/links";
  std::shared_ptr<Transport> transport =
      connectGloo(store, config.rank, config.size, options);
  auto board = std::make_shared<StoreBoard>(rendezvous->store);
  // Rank 0 closes the store it hosts before any rank leaves the shutdown handshake: a rank
  // that starts again then reaches only the next incarnation's store.
  Rendezvous* hosted = rendezvous.get();
  const TcpStore* client = rendezvous->store.get();  // lives as long as the runtime
  auto runtime = std::make_unique<RuntimeImpl>(agreed, std::move(transport),
                                               std::move(rendezvous), std::move(board),
                                               [hosted] { hosted->server.reset(); });
  runtime->setStoreTraffic([client](RuntimeStats& stats) {
    const TcpStore::Traffic traffic = client->traffic();
    stats.rendezvousRequests = traffic.requests;
    stats.rendezvousBytesSent = traffic.bytesSent;
    stats.rendezvousBytesReceived = traffic.bytesReceived;
  });
  return runtime;
#endif
}

}  // namespace cerar
