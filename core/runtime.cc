// The runtime's front end: each call checks its arguments (core/control/arguments.h) and enqueues
// one unit for the coordinator thread (core/control/coordinator.h), which does everything else.
#include "core/runtime.h"

#include <algorithm>
#include <thread>

#include "core/control/arguments.h"
#include "core/config/bootstrap.h"
#include "core/config/config.h"
#include "core/control/coordinator.h"
#include "core/device/device.h"
#include "core/device/device_queue.h"
#include "core/config/job_config.h"
#include "ops/collectives.h"
#include "common/error.h"
#include "ops/transport/inproc.h"
#include "ops/transport/subset.h"

namespace cerar {

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
  explicit RuntimeImpl(JobLinks links)
      : config_(links.config), topology_(std::move(links.topology)),
        transport_(std::move(links.transport)),
        rendezvous_(std::move(links.rendezvous)), storeTraffic_(std::move(links.storeTraffic)),
        logger_(transport_->rank(), parseLogLevel(config_.logLevel), config_.logSink),
        timeline_(transport_->rank()),
        queue_(transport_->rank()),
        sets_(transport_->size()),
        devices_(config_.deviceOps, deviceSetup(config_, topology_, transport_)),
        coordinator_(config_, transport_, queue_, timeline_, logger_, devices_, sets_,
                     std::move(links.beforeRelease)) {
    if (!config_.timeline.empty()) startTimeline(config_.timeline, config_.timelineMarkCycles);
    coordinator_.setBlameBoard(std::move(links.board), config_.hostStore);
    if (links.local && links.cross) coordinator_.setHostLevels(links.local, links.cross);
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
  int localRank() const override { return topology_.localRank(rank()); }
  int localSize() const override { return topology_.localSize(rank()); }
  int crossRank() const override { return topology_.crossRank(rank()); }
  int crossSize() const override { return topology_.crossSize(rank()); }
  bool isHomogeneous() const override { return topology_.homogeneous(); }

  Handle allreduce(const std::string& name, Tensor input, Tensor output, Op op, double prescale,
                   double postscale, Callback callback, Wire wire, int32_t processSet) override {
    // The unit built here, not through groupedAllreduce: its vectors are the entry's own.
    std::vector<Tensor> inputs, outputs;
    inputs.push_back(std::move(input));
    outputs.push_back(std::move(output));
    auto [entry, invalid] = reductionEntry(Kind::kAllreduce, std::vector<std::string>{name},
                                           std::move(inputs), std::move(outputs), op, prescale,
                                           postscale, processSet);
    entry->request.description.wire = wire;
    return enqueue(std::move(entry), invalid, std::move(callback));
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
    const Status invalid = checkAlltoallCall(name, input, std::move(splits),
                                             entry->request.description, sets_.find(processSet),
                                             rank());
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
    const Status invalid = checkAllgatherCall(names, inputs, d, sets_.find(processSet), rank());
    entry->inputs = inputs;
    entry->outputs = std::move(inputs);
    return enqueue(std::move(entry), invalid, std::move(callback));
  }

  Handle broadcast(const std::string& name, Tensor tensor, int root, Callback callback,
                   int32_t processSet) override {
    auto entry = singleTensorEntry(Kind::kBroadcast, name, tensor, processSet);
    entry->request.description.root = root;
    const Status invalid = checkBroadcastCall(name, tensor, entry->request.description,
                                              sets_.find(processSet), rank(), size());
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
    const Status invalid = checkSetRemoval(id);
    return enqueue(std::move(entry), invalid, std::move(callback));
  }

  std::optional<std::vector<int>> processSetRanks(int32_t id) const override {
    const auto set = sets_.find(id);
    if (!set) return std::nullopt;
    return set->ranks;
  }
  std::vector<int32_t> processSetIds() const override { return sets_.ids(); }
  std::pair<int, int> processSetMembership(int32_t id) const override {
    const auto set = sets_.find(id);
    const Status invalid = checkMember(set, id, rank(), "cerar");
    if (!invalid.ok()) invalid.raise();
    return {set->rankOf(rank()), set->size()};
  }
  bool dynamicProcessSets() const override { return config_.dynamicProcessSets; }
  Status inFlight(const std::vector<std::string>& names, int32_t processSet) const override {
    return queue_.inFlight(names, processSet);
  }

  Handle join(Callback callback) override {
    auto state = std::make_shared<OperationState>();
    state->callback = std::move(callback);
    const Status refused = queue_.pushJoin(state);
    if (!refused.ok()) state->complete(refused);
    return Handle(state);
  }

  void startTimeline(const std::string& path, bool markCycles) override {
    const std::string mine = timelinePath(path, rank());
    if (!mine.empty()) timeline_.start(mine, markCycles);
  }
  void stopTimeline() override { timeline_.stop(); }
  RuntimeStats stats() const override {
    RuntimeStats stats = coordinator_.stats();
    if (storeTraffic_) storeTraffic_(stats);
    return stats;
  }

 private:
  // A grouped allreduce or reducescatter in `processSet`: its entry, and why it is refused
  // (ok: it is not).
  std::pair<std::unique_ptr<Entry>, Status> reductionEntry(
      Kind kind, std::vector<std::string> names, std::vector<Tensor> inputs,
      std::vector<Tensor> outputs, Op op, double prescale, double postscale,
      int32_t processSet) {
    auto entry = std::make_unique<Entry>();
    entry->request.names = std::move(names);
    const std::vector<std::string>& unitNames = entry->request.names;
    Description& d = entry->request.description;
    d.kind = kind;
    d.op = op;
    d.prescale = prescale;
    d.postscale = postscale;
    d.processSet = processSet;
    const Status invalid =
        checkReductionCall(unitNames, inputs, outputs, d, sets_.find(processSet), rank());
    entry->inputs = std::move(inputs);
    entry->outputs = std::move(outputs);
    return {std::move(entry), invalid};
  }

  // A process set change: negotiated in set 0 under one name, so every rank applies the same
  // changes in the same order (core/control/process_sets.h).
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

  static DeviceSetup deviceSetup(const RuntimeConfig& config, const HostTopology& topology,
                                 std::shared_ptr<Transport> transport) {
    DeviceSetup setup;
    // Device work runs on the device queue's thread, beside the coordinator's on the same
    // links: it gets channels of its own (Gloo's and the in-process transport have them).
    const int rank = transport->rank();
    if (topology.layered() && topology.size() == transport->size()) {
      const auto over = [&](uint32_t tag, std::vector<int> members) {
        std::shared_ptr<Transport> channel = transport->channel(tag);
        return channel ? std::make_shared<SubsetTransport>(channel, std::move(members))
                       : nullptr;
      };
      setup.local = over(kDeviceLocalChannelTag, topology.localMembers(rank));
      setup.cross = over(kDeviceCrossChannelTag, topology.crossMembers(rank));
    }
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
    entry->key = entry->request.key();
    entry->enqueued = Clock::now();
    Status why = invalid;
    if (why.ok() && entry->request.description.onDevice) why = prepareDevice(*entry);
    const Status refused =
        why.ok() ? queue_.push(std::move(entry)) : withContext(why, "cerar: ", "");
    if (!refused.ok()) state->complete(refused);  // the callback runs on this thread
    return Handle(state);
  }

  RuntimeConfig config_;
  HostTopology topology_;
  std::shared_ptr<Transport> transport_;
  std::shared_ptr<void> rendezvous_;  // the store (and rank 0's server), kept for the job
  std::function<void(RuntimeStats&)> storeTraffic_;  // the store's counters, if one
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

// A layered job's levels over the caller's transport, each on a channel of its own where it
// has them.
void layerOver(JobLinks& job) {
  const int rank = job.transport->rank();
  const auto over = [&](uint32_t tag, std::vector<int> members) -> std::shared_ptr<Transport> {
    std::shared_ptr<Transport> channel = job.transport->channel(tag);
    return std::make_shared<SubsetTransport>(channel ? channel : job.transport,
                                             std::move(members));
  };
  job.local = over(kLocalChannelTag, job.topology.localMembers(rank));
  job.cross = over(kCrossChannelTag, job.topology.crossMembers(rank));
  job.config.hosts = job.topology.hosts();
  job.config.ranksPerHost = job.topology.localSize(rank);
}

}  // namespace

std::unique_ptr<Runtime> Runtime::startWith(const RuntimeConfig& config,
                                            std::shared_ptr<Transport> transport) {
  CERAR_CHECK_ARGUMENT(transport != nullptr, "cerar: startWith needs a transport");
  RuntimeConfig adjusted = config;
  adjusted.rank = transport->rank();
  adjusted.size = transport->size();
  if (adjusted.localSize > adjusted.size || adjusted.localRank >= adjusted.localSize) {
    adjusted.localRank = 0, adjusted.localSize = 1;
  }
  validateConfig(adjusted);
  Transport& links = *transport;
  JobLinks job;
  job.config = agreeJobConfig(adjusted, [&](const std::vector<uint8_t>& mine) {
    return broadcastBytes(links, mine, 0);
  });
  // The caller declares the hosts: blocks of localSize ranks (each rank's own declaration).
  job.topology = blockTopology(job.config.size, adjusted.localSize);
  job.transport = std::move(transport);
  if (job.topology.layered()) layerOver(job);
  return std::make_unique<RuntimeImpl>(std::move(job));
}

std::unique_ptr<Runtime> Runtime::start(const RuntimeConfig& config) {
  validateConfig(config);
  if (config.size == 1) {
    InprocHub hub(1, timeoutOf(config));
    JobLinks job;
    job.config = config;
    job.transport = hub.connect(0);
    job.topology = blockTopology(1, 1);
    return std::make_unique<RuntimeImpl>(std::move(job));
  }
#ifdef CERAR_NO_GLOO
  throw Error("cerar: this build has no Gloo; more than one rank needs Runtime::startWith");
#else
  return std::make_unique<RuntimeImpl>(connectThroughStore(config));
#endif
}

}  // namespace cerar
