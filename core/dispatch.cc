#include "core/dispatch.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/allreduce_pipeline.h"
#include "core/device_queue.h"
#include "core/error_budget.h"
#include "core/scaling.h"
#include "ops/algorithms/share_correction.h"
#include "ops/collectives.h"
#include "ops/common/error.h"
#include "ops/transport/subset.h"

namespace cerar {

namespace {

// max |a - b| / max |b| over n elements of an f32 or f64 buffer (0 when b is all zero).
template <typename T>
double maxRelativeDifference(const T* a, const T* b, size_t n) {
  double difference = 0, scale = 0;
  for (size_t e = 0; e < n; ++e) {
    difference = std::max(difference, std::abs(double(a[e]) - double(b[e])));
    scale = std::max(scale, std::abs(double(b[e])));
  }
  return scale > 0 ? difference / scale : difference;
}

double maxRelativeDifference(DType dtype, const std::byte* a, const std::byte* b, size_t n) {
  if (dtype == DType::kFloat64) {
    return maxRelativeDifference(reinterpret_cast<const double*>(a),
                                 reinterpret_cast<const double*>(b), n);
  }
  return maxRelativeDifference(reinterpret_cast<const float*>(a),
                               reinterpret_cast<const float*>(b), n);
}

// Timeline arguments of a CERAR buffer that took the exact ring (non-finite input).
std::string fallbackArgs(const RunStats& run) {
  return run.nonFiniteFallback ? ", \"non_finite_fallback\": true" : "";
}

// Where one tensor of a fusion group lies in the fusion buffer; entry is null for a joined
// rank's share (the op's identity).
struct Slot {
  Entry* entry;
  size_t tensor;
  size_t offset;    // elements
  size_t elements;
};

// The group's tensors in order, packed back to back.
std::vector<Slot> fusionLayout(const std::vector<const Response*>& units,
                               const std::vector<Entry*>& entries) {
  std::vector<Slot> slots;
  size_t offset = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    for (size_t k = 0; k < units[u]->description.shapes.size(); ++k) {
      const size_t n = shapeElements(units[u]->description.shapes[k]);
      slots.push_back(Slot{entries[u], k, offset, n});
      offset += n;
    }
  }
  return slots;
}

// One tensor of this rank alone: reduced in its output, saving the copy through the buffer.
bool reducesInPlace(const std::vector<const Response*>& units,
                    const std::vector<Entry*>& entries) {
  return units.size() == 1 && entries[0] != nullptr && entries[0]->inputs.size() == 1;
}

// The coordinator's shapes decide the layout; this rank's tensors must have exactly those
// sizes, or unpacking would write past them. (A "mismatch" code at merge.)
void checkLocalSizes(const Response& unit, const Entry& entry, int rank, int size) {
  const Description& d = unit.description;
  if (d.kind == Kind::kBarrier) return;
  auto fail = [&](size_t k, size_t expected, size_t local) {
    return MismatchError(detail::concat("rank ", rank, ": ", kindName(d.kind), " of '",
                                unit.names.at(std::min(k, unit.names.size() - 1)),
                                "': the coordinator's shape has ", expected,
                                " elements, this rank's tensor ", local));
  };
  const bool grouped = d.kind != Kind::kBroadcast && d.kind != Kind::kAlltoall;
  const size_t tensors = grouped ? d.shapes.size() : 1;
  CERAR_ENFORCE(entry.inputs.size() == tensors && d.shapes.size() >= tensors, "rank ", rank,
                ": ", tensors, " tensors in the coordinator's response, ", entry.inputs.size(),
                " here");
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
      CERAR_ENFORCE(!row.empty() && !mine.empty(), "rank ", rank, ": alltoall of a scalar");
      row[0] = mine[0] = 1;
      if (shapeElements(row) != shapeElements(mine))
        throw fail(k, shapeElements(row), shapeElements(mine));
      const size_t N = size_t(size);
      CERAR_ENFORCE(unit.firstDims.size() == N * N, "rank ", rank,
                    ": alltoall response without every rank's splits");
      int64_t sent = 0;
      for (size_t j = 0; j < N; ++j) sent += unit.firstDims[rank * N + j];
      CERAR_ENFORCE(sent <= entry.inputs[0].shape[0], "rank ", rank, ": alltoall sends ", sent,
                    " rows of ", entry.inputs[0].shape[0]);
      continue;
    }
    if (entry.inputs[k].elements() != expected) throw fail(k, expected, entry.inputs[k].elements());
    size_t output = expected;
    if (d.kind == Kind::kReducescatter) {
      std::vector<int64_t> share = d.shapes[k];
      CERAR_ENFORCE(!share.empty(), "rank ", rank, ": reducescatter of a scalar");
      share[0] = scatterRows(share[0], rank, size);
      output = shapeElements(share);
    }
    if (k < entry.outputs.size() && d.kind != Kind::kAllgather &&
        entry.outputs[k].elements() != output) {
      throw fail(k, output, entry.outputs[k].elements());
    }
  }
}

// What one fused all-reduce adds to the stats. What ran: a CERAR decision that fell back on
// non-finite input ran the exact ring.
void countAllreduce(RuntimeStats& stats, const RunStats& run, const FusedGroup& decision,
                    Wire wire, bool adasum, int N, size_t tensors) {
  stats.fusedBuffers += 1;
  stats.tensorsReduced += tensors;
  stats.bytesSent += run.bytesSent;
  const bool ranCerar = decision.algorithm == Algorithm::kCerar && !adasum &&
                        !run.nonFiniteFallback;
  if (!adasum) (ranCerar ? stats.cerarBuffers : stats.ringBuffers) += 1;
  const Wire ranWire = run.wireFallback ? Wire::kNone : wire;
  if (ranWire != Wire::kNone) stats.wireBuffers += 1;
  stats.wireFallbacks += run.wireFallback ? 1 : 0;
  stats.budgetBuffers += decision.budgeted ? 1 : 0;
  if (!adasum) {
    stats.lastChoice = ranCerar ? "cerar"
                       : ranWire != Wire::kNone ? std::string("ring-") + wireName(ranWire)
                                                : "ring";
  }
  stats.nonFiniteFallbacks += run.nonFiniteFallback ? 1 : 0;
  stats.lastComponents = ranCerar ? decision.components : N;
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
    : base_(std::move(transport)), timeline_(timeline), devices_(devices) {
  groups_[kGlobalProcessSet] = std::make_unique<Group>(base_);
}

Dispatcher::Group& Dispatcher::groupFor(const ProcessSet& set) {
  auto& group = groups_[set.id];
  if (!group) {
    // Set ids are never reused, so a set's tag is its own for the life of the job.
    std::shared_ptr<Transport> links = base_->channel(uint32_t(set.id));
    group = std::make_unique<Group>(
        std::make_shared<SubsetTransport>(links ? links : base_, set.ranks));
  }
  return *group;
}

void Dispatcher::record(const std::vector<const Response*>& units, const char* phase,
                        Clock::time_point start, Clock::time_point end, const std::string& args) {
  if (!timeline_.active()) return;
  for (const Response* unit : units) {
    for (const auto& name : unit->names) timeline_.record(name, phase, start, end, args);
  }
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
  switch (first.description.kind) {
    case Kind::kAllreduce: return allreduce(units, entries, decision, stats);
    case Kind::kReducescatter: reducescatter(units, entries, stats); break;
    case Kind::kAlltoall: alltoall(first, entries.front(), stats); break;
    case Kind::kAllgather: allgather(units, entries, stats); break;
    case Kind::kBroadcast: broadcast(first, entries.front(), stats); break;
    case Kind::kBarrier: break;  // the negotiation itself was the barrier
    case Kind::kProcessSet: break;  // applied by the coordinator
  }
  return {};
}

std::string Dispatcher::measureError(const std::byte* result, size_t total, DType dtype,
                                     const AllreduceOptions& options, RuntimeStats& stats) {
  // Every rank runs the same extra ring (the knob is the same everywhere), so it pairs up.
  AllreduceOptions exact = options;
  exact.algorithm = Algorithm::kRing;
  exact.wire = Wire::kNone;
  exact.fp16Guard = false;
  group_->communicator.allreduce(exactCopy_.data(), total, dtype, exact);
  const double error = maxRelativeDifference(dtype, result, exactCopy_.data(), total);
  stats.measuredErrorLast = error;
  stats.measuredErrorMax = std::max(stats.measuredErrorMax, error);
  stats.measuredErrorSum += error;
  stats.measuredBuffers += 1;
  return detail::concat(", \"measured_error\": ", error);
}

DeviceUnit Dispatcher::allreduce(const std::vector<const Response*>& units,
                                 const std::vector<Entry*>& entries,
                                 const FusedGroup& decision, RuntimeStats& stats) {
  const Description& d = units.front()->description;
  const size_t elementSize = dtypeSize(d.dtype);
  const ReduceOp op = reduceOpOf(d.op);
  size_t total = 0;
  for (const Response* unit : units) total += unit->description.elements();

  const int N = group_->transport->size();
  // Everything below comes from the coordinator rank's decision, the same on every rank, and
  // negotiation agreed on the tensors: parameter agreement would only repeat it.
  AllreduceOptions options;
  options.algorithm = decision.algorithm;
  options.components = decision.components;
  options.eps = decision.eps;
  options.op = op;
  options.verifyParameters = false;
  options.shareCorrection = decision.shareCorrection;
  // Adasum runs on the host: device tensors are copied in and out like a mixed unit's.
  const bool adasum = d.op == Op::kAdasum;
  options.wire = adasum ? Wire::kNone : decision.wire;
  const bool onDevice = units.front()->reducedOnDevice() && !adasum;
  const bool cerar = decision.algorithm == Algorithm::kCerar && !adasum;
  options.fp16Guard = decision.budgeted && options.wire == Wire::kFloat16;
  const bool lossyWire = options.wire != Wire::kNone;
  std::string errorArgs;
  // The bound of what was decided (relative to max sum_i |g_i|): CERAR's and a 16-bit wire's
  // always, the exact ring's under an error budget.
  if (cerar || lossyWire || decision.budgeted) {
    const double bound =
        cerar ? predictedErrorBound(N, decision.components, decision.eps, d.dtype)
        : lossyWire ? wireErrorBound(N, options.wire)
                    : ringErrorBound(N, d.dtype, op);
    stats.predictedErrorMax = std::max(stats.predictedErrorMax, bound);
    stats.predictedErrorLast = bound;
    errorArgs = detail::concat(", \"predicted_error\": ", bound,
                               decision.budgeted ? ", \"budgeted\": true" : "");
  }
  const bool measure = (cerar || lossyWire) && decision.measureError;
  const std::string args = detail::concat(
      "\"algorithm\": \"", adasum ? "adasum" : algorithmName(decision.algorithm), "\", \"c\": ",
      decision.components, ", \"eps\": ", decision.eps, ", \"bytes\": ", total * elementSize,
      ", \"tensors\": ", units.size(),
      options.wire == Wire::kNone ? "" : ", \"wire\": \"",
      options.wire == Wire::kNone ? "" : wireName(options.wire),
      options.wire == Wire::kNone ? "" : "\"");

  size_t tensors = 0;
  for (Entry* e : entries) tensors += e ? e->inputs.size() : 0;
  // The group's layout and steps, the same wherever it is reduced.
  PipelineJob job;
  job.dtype = d.dtype;
  job.op = op;
  job.total = total;
  job.prescale = d.prescale;
  job.factor = d.postscale / (d.op == Op::kAverage ? double(N) : 1.0);
  std::vector<PipelinePart> parts;
  if (reducesInPlace(units, entries) &&
      (onDevice || (entries[0]->inputs[0].device < 0 && entries[0]->outputs[0].device < 0))) {
    job.direct = entries[0]->outputs[0].data;
  }
  for (const Slot& slot : fusionLayout(units, entries)) {
    PipelinePart part;
    part.offset = slot.offset;
    part.elements = slot.elements;
    if (slot.entry != nullptr) {
      const Tensor& in = slot.entry->inputs[slot.tensor];
      const Tensor& out = slot.entry->outputs[slot.tensor];
      part.in = in.data;
      part.out = out.data;
      part.inDevice = in.device;
      part.outDevice = out.device;
      if (slot.tensor == 0 && in.device >= 0) part.ready = &slot.entry->ready;
    }
    parts.push_back(part);
  }
  if (measure) {  // debug error mode: the input and the result, on the host
    exactCopy_.resize(total * elementSize);
    staged_.resize(total * elementSize);
    job.input = exactCopy_.data();
    job.result = staged_.data();
  }
  // The exact ring over the input, compared with the result.
  auto measured = [&](const RunStats& run) {
    return measure && !run.nonFiniteFallback && !run.wireFallback
               ? measureError(staged_.data(), total, d.dtype, options, stats)
               : std::string();
  };

  if (onDevice) {
    const auto start = Clock::now();
    int device = -1;  // -1 for a joined rank without tensors of its own
    for (const PipelinePart& p : parts) device = p.in ? p.inDevice : device;
    DeviceQueue& queue = devices_.get(device);
    // The job owns what it waits for: a unit that timed out completes (and frees its entries)
    // while its work may still run.
    std::vector<DeviceEvent> ready;
    for (PipelinePart& p : parts) {
      if (p.ready) ready.insert(ready.end(), p.ready->begin(), p.ready->end());
      p.ready = nullptr;
    }
    auto ran = std::make_shared<RunStats>();
    queue.enqueue([ran, ready = std::move(ready), parts = std::move(parts), job,
                   options](DeviceOps& ops) {
      for (const DeviceEvent& event : ready) ops.after(event);  // the producers' kernels
      DevicePipelineMemory memory(ops, options);
      *ran = runPipeline(memory, parts, job);
    });
    if (measure) {
      queue.run([](DeviceOps&) {});  // debug error mode waits for the downloads
      errorArgs += measured(*ran);
    }
    DeviceUnit unit;
    unit.mark = queue.record();
    // The run's figures are there once the mark is reached: counted then, before the handles
    // complete, with the timeline's ALLREDUCE event from dispatch to completion.
    std::vector<std::string> names;
    for (const Response* u : units) names.insert(names.end(), u->names.begin(), u->names.end());
    const Wire wire = options.wire;
    unit.finish = [this, ran, names = std::move(names), start, decision, wire, N, tensors,
                   args = args + ", \"device\": true" + errorArgs](RuntimeStats& s) {
      if (timeline_.active()) {
        for (const auto& name : names) {
          timeline_.record(name, "ALLREDUCE", start, Clock::now(), args + fallbackArgs(*ran));
        }
      }
      countAllreduce(s, *ran, decision, wire, false, N, tensors);
    };
    return unit;
  }

  HostPipelineMemory::Reducer reducer{&group_->communicator, options, N};
  if (adasum) {
    reducer.adasum = &adasum_;
    reducer.transport = group_->transport.get();
  }
  HostPipelineMemory memory(fusion_, devices_, reducer);
  const auto packStart = Clock::now();
  Clock::time_point reduceStart, unpackStart;
  const RunStats run = runPipeline(memory, parts, job, [&](const char* done) {
    (std::string(done) == "pack" ? reduceStart : unpackStart) = Clock::now();
  });
  const auto end = Clock::now();
  errorArgs += measured(run);
  record(units, "MEMCPY_IN", packStart, reduceStart);
  record(units, "ALLREDUCE", reduceStart, unpackStart,
         args + errorArgs + fallbackArgs(run) +
             (run.wireFallback ? ", \"wire_fallback\": true" : ""));
  record(units, "MEMCPY_OUT", unpackStart, end);
  countAllreduce(stats, run, decision, options.wire, adasum, N, tensors);
  return {};
}

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

void Dispatcher::reducescatter(const std::vector<const Response*>& units,
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
  record(units, "MEMCPY_IN", packStart, reduceStart);
  const RunStats run =
      group_->communicator.reduceScatter(buffer, chunks, d.dtype, reduceOpOf(d.op));
  const auto unpackStart = Clock::now();
  record(units, "REDUCESCATTER", reduceStart, unpackStart,
         detail::concat("\"algorithm\": \"ring\", \"bytes\": ", total * elementSize,
                        ", \"tensors\": ", parts.size()));
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
  record(units, "MEMCPY_OUT", unpackStart, Clock::now());
  stats.reducescatterBuffers += 1;
  stats.tensorsScattered += parts.size();
  stats.bytesSent += run.bytesSent;
}

void Dispatcher::alltoall(const Response& unit, Entry* entry, RuntimeStats& stats) {
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
  record({&unit}, "MEMCPY_IN", start, exchangeStart);
  pairwiseAlltoall(*group_->transport, in, sendBytes, out.data(), recvBytes);
  record({&unit}, "ALLTOALL", exchangeStart, Clock::now(),
         detail::concat("\"algorithm\": \"pairwise\", \"bytes\": ", out.size()));
  entry->state->outputShape = entry->inputs[0].shape;
  entry->state->outputShape[0] = rows;
  entry->state->receivedSplits = std::move(received);
  for (int j = 0; j < N; ++j) stats.bytesSent += j == rank ? 0 : sendBytes[j];
}

void Dispatcher::allgather(const std::vector<const Response*>& units,
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
  record(units, "MEMCPY_IN", start, gatherStart);
  ringAllgather(*group_->transport, buffer, blocks);
  const auto unpackStart = Clock::now();
  record(units, "ALLGATHER", gatherStart, unpackStart,
         detail::concat("\"algorithm\": \"ring\", \"bytes\": ", total, ", \"tensors\": ",
                        parts.size()));
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
  record(units, "MEMCPY_OUT", unpackStart, Clock::now());
  stats.allgatherBuffers += 1;
  stats.bytesSent += total - blocks[rank];
}

void Dispatcher::broadcast(const Response& unit, Entry* entry, RuntimeStats& stats) {
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
  record({&unit}, "BROADCAST", start, Clock::now(),
         detail::concat("\"algorithm\": \"chain\", \"root\": ", d.root, ", \"bytes\": ", bytes));
  const int n = group_->transport->size();
  const int position = (group_->transport->rank() - rootRank + n) % n;
  if (position < group_->transport->size() - 1) stats.bytesSent += bytes;
}

}  // namespace cerar
