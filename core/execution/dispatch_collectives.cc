// The dispatcher's collectives other than the all-reduce: reduce-scatter, alltoall, allgather
// and broadcast (core/execution/dispatch.h), and the timeline events of all. Device tensors go through
// host memory here.
#include <cstring>

#include "core/device/device_queue.h"
#include "core/execution/dispatch.h"
#include "core/execution/scaling.h"
#include "ops/collectives.h"
#include "common/error.h"

namespace cerar {

namespace {

// Host bytes of a tensor: its own memory, or a staged copy of a device tensor (after the
// producers' events).
const std::byte* hostBytes(const Tensor& t, const Entry& entry, DeviceSlot& devices,
                           std::vector<std::byte>& staged) {
  if (t.device < 0) return static_cast<const std::byte*>(t.data);
  staged.resize(t.bytes());
  devices.get(t.device).download(staged.data(), t.data, staged.size(), &entry.ready);
  return staged.data();
}

}  // namespace

void Dispatcher::record(const std::vector<const Response*>& units, const std::string& activity,
                        Clock::time_point start, Clock::time_point end, const JsonObject& args) {
  if (!timeline_.active()) return;
  for (const Response* unit : units) {
    for (const auto& name : unit->names) {
      timeline_.record(tensorRow(unit->description, name), activity, start, end, args);
    }
  }
}

Dispatcher::OperationRows Dispatcher::operationRows(const std::vector<const Response*>& units,
                                                    const std::vector<Entry*>& entries) const {
  OperationRows rows;
  if (!timeline_.active()) return rows;
  rows.activity = operationActivity(units.front()->description);
  const auto now = Clock::now();
  for (size_t u = 0; u < units.size(); ++u) {
    for (const auto& name : units[u]->names) {
      rows.starts.emplace_back(tensorRow(units[u]->description, name),
                               entries[u] ? entries[u]->responded : now);
    }
  }
  return rows;
}

void Dispatcher::recordOperation(const OperationRows& rows, Clock::time_point end,
                                 const JsonObject& args) {
  for (const auto& [name, start] : rows.starts) {
    timeline_.record(name, rows.activity, start, end, args);
  }
}

JsonObject Dispatcher::reducescatter(const std::vector<const Response*>& units,
                                     const std::vector<Entry*>& entries, RuntimeStats& stats) {
  const Description& d = units.front()->description;
  const size_t elementSize = dtypeSize(d.dtype);
  const int N = group_->transport->size(), rank = group_->transport->rank();
  // Every tensor of the group, with its rows and a row's elements.
  struct Part {
    const Tensor* input;
    const Tensor* output;
    const Entry* entry;
    int64_t rows;
    size_t row;
  };
  std::vector<Part> parts;
  for (size_t u = 0; u < units.size(); ++u) {
    CERAR_ENFORCE(entries[u] != nullptr, "rank ", rank, ": reducescatter without this rank");
    for (size_t k = 0; k < units[u]->description.shapes.size(); ++k) {
      const auto& shape = units[u]->description.shapes[k];
      std::vector<int64_t> row = shape;
      row[0] = 1;
      parts.push_back(Part{&entries[u]->inputs[k], &entries[u]->outputs[k], entries[u],
                           shape[0], shapeElements(row)});
    }
  }
  std::vector<size_t> chunks(N, 0);
  for (int r = 0; r < N; ++r) {
    for (const Part& p : parts) chunks[r] += size_t(scatterRows(p.rows, r, N)) * p.row;
  }
  size_t total = 0, mine = 0;
  for (int r = 0; r < N; ++r) {
    if (r < rank) mine += chunks[r];
    total += chunks[r];
  }
  const auto packStart = Clock::now();
  if (fusion_.size() < total * elementSize) fusion_.resize(total * elementSize);
  std::byte* buffer = fusion_.data();
  std::vector<std::vector<std::byte>> staged(parts.size());
  std::vector<const std::byte*> inputs;
  for (size_t i = 0; i < parts.size(); ++i) {
    inputs.push_back(hostBytes(*parts[i].input, *parts[i].entry, devices_, staged[i]));
  }
  size_t at = 0;  // elements
  for (int r = 0; r < N; ++r) {
    for (size_t i = 0; i < parts.size(); ++i) {
      const Part& p = parts[i];
      const size_t n = size_t(scatterRows(p.rows, r, N)) * p.row;
      const size_t offset = size_t(scatterOffset(p.rows, r, N)) * p.row;
      if (n > 0) {
        scaledCopy(d.dtype, inputs[i] + offset * elementSize, buffer + at * elementSize, n,
                   d.prescale);
      }
      at += n;
    }
  }
  const auto reduceStart = Clock::now();
  record(units, kMemcpyInActivity, packStart, reduceStart);
  const RunStats run =
      group_->communicator.reduceScatter(buffer, chunks, d.dtype, reduceOpOf(d.op));
  const auto unpackStart = Clock::now();
  record(units, collectiveActivity("ring", d), reduceStart, unpackStart);
  const double factor = d.postscale / (d.op == Op::kAverage ? double(N) : 1.0);
  at = mine;
  for (const Part& p : parts) {
    const size_t n = size_t(scatterRows(p.rows, rank, N)) * p.row;
    std::byte* from = buffer + at * elementSize;
    if (p.output->device >= 0) {
      scaledCopy(d.dtype, from, from, n, factor);
      devices_.get(p.output->device).upload(p.output->data, from, n * elementSize);
    } else if (n > 0) {
      scaledCopy(d.dtype, from, p.output->data, n, factor);
    }
    at += n;
  }
  record(units, kMemcpyOutActivity, unpackStart, Clock::now());
  stats.reducescatterBuffers += 1;
  stats.tensorsScattered += parts.size();
  stats.bytesSent += run.bytesSent;
  stats.bytesReceived += run.bytesReceived;
  return JsonObject()
      .add("algorithm", "ring")
      .add("bytes", total * elementSize)
      .add("tensors", parts.size());
}

JsonObject Dispatcher::alltoall(const Response& unit, Entry* entry, RuntimeStats& stats) {
  CERAR_ENFORCE(entry != nullptr, "rank ", group_->transport->rank(),
                ": alltoall without this rank");
  const Description& d = unit.description;
  const int N = group_->transport->size(), rank = group_->transport->rank();
  std::vector<int64_t> row = d.shapes.at(0);
  row[0] = 1;
  const size_t rowBytes = shapeElements(row) * dtypeSize(d.dtype);
  std::vector<size_t> sendBytes(N), recvBytes(N);
  std::vector<int64_t> received(N);
  int64_t rows = 0;
  for (int j = 0; j < N; ++j) {
    sendBytes[j] = size_t(unit.firstDims.at(size_t(rank) * N + j)) * rowBytes;
    received[j] = unit.firstDims.at(size_t(j) * N + rank);
    recvBytes[j] = size_t(received[j]) * rowBytes;
    rows += received[j];
  }
  const auto start = Clock::now();
  std::vector<std::byte> staged;
  const std::byte* in = hostBytes(entry->inputs[0], *entry, devices_, staged);
  std::vector<std::byte>& out = entry->state->output;
  out.resize(size_t(rows) * rowBytes);
  const auto exchangeStart = Clock::now();
  record({&unit}, kMemcpyInActivity, start, exchangeStart);
  pairwiseAlltoall(*group_->transport, in, sendBytes, out.data(), recvBytes);
  record({&unit}, collectiveActivity("pairwise", d), exchangeStart, Clock::now());
  entry->state->outputShape = entry->inputs[0].shape;
  entry->state->outputShape[0] = rows;
  entry->state->receivedSplits = std::move(received);
  for (int j = 0; j < N; ++j) {
    stats.bytesSent += j == rank ? 0 : sendBytes[j];
    stats.bytesReceived += j == rank ? 0 : recvBytes[j];
  }
  return JsonObject().add("algorithm", "pairwise").add("bytes", out.size());
}

JsonObject Dispatcher::allgather(const std::vector<const Response*>& units,
                           const std::vector<Entry*>& entries, RuntimeStats& stats) {
  const int N = group_->transport->size(), rank = group_->transport->rank();
  const size_t elementSize = dtypeSize(units.front()->description.dtype);
  // Every tensor of the group: its unit, its index there, and one row's bytes.
  struct Part {
    size_t unit, tensor, rowBytes;
  };
  std::vector<Part> parts;
  for (size_t u = 0; u < units.size(); ++u) {
    CERAR_ENFORCE(entries[u] != nullptr, "rank ", rank, ": allgather without this rank");
    const auto& shapes = units[u]->description.shapes;
    CERAR_ENFORCE(units[u]->firstDims.size() == size_t(N) * shapes.size(), "rank ", rank,
                  ": allgather response without every rank's rows");
    for (size_t k = 0; k < shapes.size(); ++k) {
      std::vector<int64_t> row = shapes[k];
      row[0] = 1;
      parts.push_back(Part{u, k, shapeElements(row) * elementSize});
    }
  }
  auto bytesOf = [&](size_t i, int r) {
    const Response& unit = *units[parts[i].unit];
    const size_t tensors = unit.description.shapes.size();
    return size_t(unit.firstDims[r * tensors + parts[i].tensor]) * parts[i].rowBytes;
  };
  // Rank-major blocks: rank r's block holds its rows of every tensor in order; where[r][i] is
  // part i's place in it, as an offset into the whole buffer.
  std::vector<size_t> blocks(N, 0);
  std::vector<std::vector<size_t>> where(N, std::vector<size_t>(parts.size()));
  size_t total = 0;
  for (int r = 0; r < N; ++r) {
    for (size_t i = 0; i < parts.size(); ++i) {
      where[r][i] = total + blocks[r];
      blocks[r] += bytesOf(i, r);
    }
    total += blocks[r];
  }
  const auto start = Clock::now();
  if (gathered_.size() < total) gathered_.resize(total);
  std::byte* buffer = gathered_.data();
  std::vector<std::byte> staged;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Entry& entry = *entries[parts[i].unit];
    const size_t n = bytesOf(i, rank);
    if (n > 0) {
      std::memcpy(buffer + where[rank][i],
                  hostBytes(entry.inputs[parts[i].tensor], entry, devices_, staged), n);
    }
  }
  const auto gatherStart = Clock::now();
  record(units, kMemcpyInActivity, start, gatherStart);
  ringAllgather(*group_->transport, buffer, blocks);
  const auto unpackStart = Clock::now();
  record(units, collectiveActivity("ring", units.front()->description), gatherStart,
         unpackStart);
  // Each unit's output: tensor 0 gathered (every rank's rows in rank order), then tensor 1...
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<std::byte>& out = entries[u]->state->output;
    out.clear();
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].unit != u) continue;
      for (int r = 0; r < N; ++r) {
        const std::byte* from = buffer + where[r][i];
        out.insert(out.end(), from, from + bytesOf(i, r));
      }
    }
    const Description& d = units[u]->description;
    OperationState& state = *entries[u]->state;
    if (d.shapes.size() == 1) {
      int64_t rows = 0;
      for (int64_t n : units[u]->firstDims) rows += n;
      state.outputShape = d.shapes[0];
      state.outputShape[0] = rows;
    } else {
      state.outputShape = {int64_t(out.size() / elementSize)};  // flat: tensors back to back
    }
    state.receivedSplits = units[u]->firstDims;
  }
  record(units, kMemcpyOutActivity, unpackStart, Clock::now());
  stats.allgatherBuffers += 1;
  stats.bytesSent += total - blocks[rank];
  stats.bytesReceived += total - blocks[rank];  // the ring: every block but its own, once
  return JsonObject().add("algorithm", "ring").add("bytes", total).add("tensors", parts.size());
}

JsonObject Dispatcher::broadcast(const Response& unit, Entry* entry, RuntimeStats& stats) {
  const Description& d = unit.description;
  const size_t bytes = d.bytes();
  void* data = nullptr;
  // Device tensors travel through host memory here (a broadcast is rare: initial weights).
  const int device = entry ? entry->inputs[0].device : -1;
  const bool ops = device >= 0;
  const int rootRank = set_->rankOf(d.root);  // a global rank; validated at enqueue
  CERAR_ENFORCE(rootRank >= 0, "broadcast root ", d.root, " is not in process set ", set_->id);
  const bool root = group_->transport->rank() == rootRank;
  if (entry && !ops) {
    data = entry->outputs[0].data;
  } else {
    if (fusion_.size() < bytes) fusion_.resize(bytes);  // a joined rank relays root's bytes
    data = fusion_.data();
  }
  const auto start = Clock::now();
  if (ops && root) {
    devices_.get(device).download(data, entry->inputs[0].data, bytes, &entry->ready);
  }
  chainBroadcast(*group_->transport, data, bytes, rootRank);
  if (ops && !root) devices_.get(device).upload(entry->outputs[0].data, data, bytes);
  record({&unit}, collectiveActivity("chain", d), start, Clock::now());
  const int n = group_->transport->size();
  const int position = (group_->transport->rank() - rootRank + n) % n;
  if (position < group_->transport->size() - 1) stats.bytesSent += bytes;  // not the chain's end
  if (position > 0) stats.bytesReceived += bytes;                           // not the root
  return JsonObject().add("algorithm", "chain").add("root", d.root).add("bytes", bytes);
}

}  // namespace cerar
