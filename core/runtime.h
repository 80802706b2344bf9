// The cerar runtime: a background coordinator that negotiates, fuses and dispatches
// collectives enqueued from any thread (Horovod-style). One Runtime object per process,
// created by init(); no file-scope globals, so init -> shutdown -> init works.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/handle.h"
#include "core/config/runtime_config.h"
#include "core/runtime_stats.h"
#include "core/types.h"
#include "ops/codec/wire.h"

namespace cerar {

class Runtime {
 public:
  // Connects to the other ranks and starts the coordinator thread.
  static std::unique_ptr<Runtime> start(const RuntimeConfig& config);
  // Starts over a transport the caller connected (e.g. in-process ranks as threads); rank and
  // size come from the transport. Every rank's coordinator drives it alone from then on.
  static std::unique_ptr<Runtime> startWith(const RuntimeConfig& config,
                                            std::shared_ptr<Transport> transport);
  virtual ~Runtime() = default;

  // Joins the coordinator; pending operations fail with ShutDownError.
  // Idempotent; also done by the destructor.
  virtual void shutdown() = 0;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where the ranks run, as they agreed at start (core/config/host_topology.h): this rank's
  // index among the ranks of its host and their number; its index among the ranks of its local
  // rank (one per host) and theirs; whether every host runs as many ranks.
  virtual int localRank() const = 0;
  virtual int localSize() const = 0;
  virtual int crossRank() const = 0;
  virtual int crossSize() const = 0;
  virtual bool isHomogeneous() const = 0;

  // Every operation is matched across ranks by name; a name may be in flight only once (in
  // its process set): enqueueing one again fails its handle with InvalidArgumentError.
  // `output` may alias `input` (in place).
  // `wire`: fp16, bf16 or int8 asks for that lossy wire on the exact ring for a sum on the
  // host (docs/wires.md); kNone leaves it to the job (CERAR_COMPRESSION). Negotiated: ranks
  // asking differently fail with a mismatch.
  virtual Handle allreduce(const std::string& name, Tensor input, Tensor output, Op op,
                           double prescale = 1.0, double postscale = 1.0,
                           Callback callback = {}, Wire wire = Wire::kNone,
                           int32_t processSet = 0) = 0;
  // Fused as one unit: all or none are dispatched together.
  virtual Handle groupedAllreduce(const std::vector<std::string>& names,
                                  std::vector<Tensor> inputs, std::vector<Tensor> outputs, Op op,
                                  double prescale = 1.0, double postscale = 1.0,
                                  Callback callback = {}, Wire wire = Wire::kNone,
                           int32_t processSet = 0) = 0;
  // Reduces each input across ranks and leaves this rank its share of the first dimension in
  // the output (scatterRows of it, the ranks' shares in rank order, as Horovod splits it);
  // the inputs have the same shapes on every rank, an output has the input's shape but for the
  // first dimension. Several names are one unit, as a grouped allreduce; units are fused.
  virtual Handle reducescatter(const std::vector<std::string>& names, std::vector<Tensor> inputs,
                               std::vector<Tensor> outputs, Op op, double prescale = 1.0,
                               double postscale = 1.0, Callback callback = {},
                               int32_t processSet = 0) = 0;
  // Sends splits[j] rows (first dimension, in order) of `input` to rank j and concatenates the
  // rows received from every rank in rank order (the handle's output; receivedSplits() says
  // how many came from each). splits has one entry per rank, summing to at most the first
  // dimension; empty splits the first dimension equally (it must divide by the size).
  virtual Handle alltoall(const std::string& name, Tensor input, std::vector<int64_t> splits,
                          Callback callback = {}, int32_t processSet = 0) = 0;
  // Concatenates along the first dimension, which may differ per rank.
  virtual Handle allgather(const std::string& name, Tensor input, Callback callback = {},
                           int32_t processSet = 0) = 0;
  // allgather of several tensors (one dtype) as one unit: the handle's output holds tensor 0
  // gathered, then tensor 1, ..., as a flat array, and receivedSplits() the rows of every rank
  // and tensor (rank-major: [rank * tensors + tensor]).
  virtual Handle groupedAllgather(const std::vector<std::string>& names,
                                  std::vector<Tensor> inputs, Callback callback = {},
                                  int32_t processSet = 0) = 0;
  // In place: every rank ends with root's tensor.
  virtual Handle broadcast(const std::string& name, Tensor tensor, int root,
                           Callback callback = {}, int32_t processSet = 0) = 0;
  virtual Handle barrier(Callback callback = {}, int32_t processSet = 0) = 0;
  // This rank has run out of data: others' all-reduces and barriers complete without it (it
  // contributes the op's identity) until every rank has joined; an allgather, broadcast,
  // alltoall or reducescatter meanwhile fails on every rank (InvalidArgumentError naming the
  // joined rank), as Horovod's.
  virtual Handle join(Callback callback = {}) = 0;

  // Process sets (Horovod's; docs/process-sets.md). Every operation above takes the id of the
  // set it runs in (0: every rank, the default); ranks and sizes in it are the set's (the
  // ranks' order is the global one), but a broadcast's root is a global rank. A rank outside
  // the set is refused with InvalidArgumentError. Each set negotiates, fuses, caches and
  // reduces on its own, over the job's links.
  // Adds a set of these global ranks: every rank of the job calls it, in the same order as
  // the other changes; the handle's processSetId() is the new id. A set of the same ranks
  // fails with InvalidArgumentError.
  virtual Handle addProcessSet(std::vector<int> ranks, Callback callback = {}) = 0;
  // Removes set `id` (not 0), every rank together; its operations still pending fail.
  virtual Handle removeProcessSet(int32_t id, Callback callback = {}) = 0;
  // The global ranks of set `id` as this rank knows it now (none: no such set).
  virtual std::optional<std::vector<int>> processSetRanks(int32_t id) const = 0;
  virtual std::vector<int32_t> processSetIds() const = 0;
  // This rank's index in set `id` and the set's size; InvalidArgumentError, as every operation
  // on the set gives, when there is no such set or this rank is not in it. The frameworks' one
  // membership check.
  virtual std::pair<int, int> processSetMembership(int32_t id) const = 0;
  // The job's CERAR_DYNAMIC_PROCESS_SETS (agreed at start): whether the Python layers let
  // sets change after init.
  virtual bool dynamicProcessSets() const = 0;

  // Why operations of these names in set `processSet` would be refused now because one of the
  // names is still in flight on this rank (InvalidArgumentError's status, the message every
  // enqueue's refusal has), or ok: the runtime keeps the names in flight, and the frameworks
  // ask it before any work of their own.
  virtual Status inFlight(const std::vector<std::string>& names, int32_t processSet) const = 0;

  // Starts writing the timeline (docs/timeline.md): `path` with "{rank}" is every rank's file,
  // else rank 0 alone writes; `markCycles`: a CYCLE_START mark at each coordinator cycle.
  virtual void startTimeline(const std::string& path, bool markCycles = false) = 0;
  virtual void stopTimeline() = 0;
  // A consistent copy of the counters. Once a handle has completed (wait() returned, or its
  // callback ran), its operation's effects (buffers, bytes, errors) are in the stats of the rank
  // that enqueued it; the coordinator publishes them before completing the handles.
  virtual RuntimeStats stats() const = 0;
};

}  // namespace cerar
