#include "core/execution/dispatch.h"

#include <algorithm>
#include <cmath>

#include "core/execution/allreduce_pipeline.h"
#include "core/device/device_queue.h"
#include "core/policy/error_budget.h"
#include "ops/algorithms/share_correction.h"
#include "ops/collectives.h"
#include "common/error.h"
#include "ops/transport/subset.h"

namespace cerar {

namespace {

// A response (the first submitter's) that disagrees with this rank's tensors: ranks disagree.
template <typename... Parts>
void requireAgreement(bool agrees, const Parts&... parts) {
  if (!agrees) throw MismatchError(detail::concat(parts...));
}

// The coordinator's shapes decide the layout; this rank's tensors must have exactly those
// sizes, or unpacking would write past them. A response missing rows or splits is internal.
void checkLocalSizes(const Response& unit, const Entry& entry, int rank, int size) {
  const Description& d = unit.description;
  if (d.kind == Kind::kBarrier) return;
  auto agree = [&](size_t k, size_t expected, size_t local) {
    requireAgreement(expected == local, "rank ", rank, ": ", kindName(d.kind), " of '",
                     unit.names.at(std::min(k, unit.names.size() - 1)),
                     "': the coordinator's shape has ", expected, " elements, this rank's tensor ",
                     local);
  };
  const bool grouped = d.kind != Kind::kBroadcast && d.kind != Kind::kAlltoall;
  const size_t tensors = grouped ? d.shapes.size() : 1;
  requireAgreement(entry.inputs.size() == tensors && d.shapes.size() >= tensors, "rank ", rank,
                   ": ", tensors, " tensors in the coordinator's response, ",
                   entry.inputs.size(), " here");
  for (size_t k = 0; k < tensors; ++k) {
    size_t expected = shapeElements(d.shapes[k]);
    if (d.kind == Kind::kAllgather) {
      std::vector<int64_t> mine = d.shapes[k];
      CERAR_ENFORCE(!mine.empty() && (rank + 1) * tensors <= unit.firstDims.size(), "rank ",
                    rank, ": allgather response without this rank's rows");
      mine[0] = unit.firstDims[rank * tensors + k];
      expected = shapeElements(mine);
    }
    if (d.kind == Kind::kAlltoall) {
      // Rows may differ per rank; a row's elements and this rank's splits may not.
      std::vector<int64_t> row = d.shapes[0], mine = entry.inputs[0].shape;
      requireAgreement(!row.empty() && !mine.empty(), "rank ", rank, ": alltoall of a scalar");
      row[0] = mine[0] = 1;
      agree(k, shapeElements(row), shapeElements(mine));
      const size_t N = size_t(size);
      CERAR_ENFORCE(unit.firstDims.size() == N * N, "rank ", rank,
                    ": alltoall response without every rank's splits");
      int64_t sent = 0;
      for (size_t j = 0; j < N; ++j) sent += unit.firstDims[rank * N + j];
      requireAgreement(sent <= entry.inputs[0].shape[0], "rank ", rank, ": alltoall sends ",
                       sent, " rows of ", entry.inputs[0].shape[0]);
      continue;
    }
    agree(k, expected, entry.inputs[k].elements());
    size_t output = expected;
    if (d.kind == Kind::kReducescatter) {
      std::vector<int64_t> share = d.shapes[k];
      requireAgreement(!share.empty(), "rank ", rank, ": reducescatter of a scalar");
      share[0] = scatterRows(share[0], rank, size);
      output = shapeElements(share);
    }
    if (k < entry.outputs.size() && d.kind != Kind::kAllgather) {
      agree(k, output, entry.outputs[k].elements());
    }
  }
}

}  // namespace

ReduceOp reduceOpOf(Op op) {
  switch (op) {
    case Op::kMin: return ReduceOp::kMin;
    case Op::kMax: return ReduceOp::kMax;
    default: return ReduceOp::kSum;
  }
}

Dispatcher::Dispatcher(std::shared_ptr<Transport> transport, Timeline& timeline,
                       DeviceSlot& devices)
    : base_(std::make_shared<TimedTransport>(std::move(transport), waits_)),
      timeline_(timeline),
      devices_(devices) {
  groups_[kGlobalProcessSet] = std::make_unique<Group>(base_);
}

Dispatcher::Group& Dispatcher::groupFor(const ProcessSet& set) {
  auto& group = groups_[set.id];
  if (!group) {
    // Set ids are never reused, so a set's tag is its own for the life of the job.
    std::shared_ptr<Transport> links = base_->channel(uint32_t(set.id));
    group = std::make_unique<Group>(
        std::make_shared<SubsetTransport>(links ? links : base_, set.ranks));
    group->communicator.setPacing(pacing_);
  }
  return *group;
}

void Dispatcher::setPacing(const Pacing& pacing) {
  pacing_ = pacing;
  for (auto& [id, group] : groups_) group->communicator.setPacing(pacing);
  if (hierarchy_) hierarchy_->setPacing(pacing);
}

void Dispatcher::setHostLevels(std::shared_ptr<Transport> local,
                               std::shared_ptr<Transport> cross) {
  // Host by host the waits are this rank's too: both levels on the same clock.
  auto timed = [this](std::shared_ptr<Transport> links) -> std::shared_ptr<Transport> {
    return links ? std::make_shared<TimedTransport>(std::move(links), waits_) : nullptr;
  };
  hierarchy_ = std::make_unique<HierarchicalAllreduce>(timed(std::move(local)),
                                                       timed(std::move(cross)));
  hierarchy_->setPacing(pacing_);
}

DeviceUnit Dispatcher::run(const std::vector<const Response*>& units,
                           const std::vector<Entry*>& entries, const FusedGroup& decision,
                           RuntimeStats& stats) {
  ProcessSet all;
  for (int rank = 0; rank < base_->size(); ++rank) all.ranks.push_back(rank);
  return run(units, entries, decision, stats, all);
}

DeviceUnit Dispatcher::run(const std::vector<const Response*>& units,
                           const std::vector<Entry*>& entries, const FusedGroup& decision,
                           RuntimeStats& stats, const ProcessSet& set) {
  CERAR_ENFORCE(!units.empty() && units.size() == entries.size(), "dispatch: bad group");
  group_ = &groupFor(set);
  set_ = &set;
  for (size_t u = 0; u < units.size(); ++u) {
    if (entries[u] != nullptr) {
      checkLocalSizes(*units[u], *entries[u], group_->transport->rank(), group_->transport->size());
    }
  }
  const Response& first = *units.front();
  OperationRows rows = operationRows(units, entries);
  JsonObject args;
  const uint64_t waitedBefore = waits_->read();
  // One observation per collective that moved data on the host (a device run's transfers are
  // not this transport's; a barrier or set change moves none).
  auto countWait = [&] {
    stats.transportWait.add(double(waits_->read() - waitedBefore) * 1e-9);
  };
  switch (first.description.kind) {
    case Kind::kAllreduce: {
      DeviceUnit unit = allreduce(units, entries, decision, stats, std::move(rows));
      if (!unit.mark) countWait();
      return unit;
    }
    case Kind::kReducescatter: args = reducescatter(units, entries, stats); break;
    case Kind::kAlltoall: args = alltoall(first, entries.front(), stats); break;
    case Kind::kAllgather: args = allgather(units, entries, stats); break;
    case Kind::kBroadcast: args = broadcast(first, entries.front(), stats); break;
    case Kind::kBarrier: break;  // the negotiation itself was the barrier
    case Kind::kProcessSet: break;  // applied by the coordinator
  }
  if (first.description.kind != Kind::kBarrier && first.description.kind != Kind::kProcessSet) {
    countWait();
  }
  recordOperation(rows, Clock::now(), args);
  return {};
}

}  // namespace cerar
