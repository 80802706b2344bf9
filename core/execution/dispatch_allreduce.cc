// The dispatcher's fused all-reduce (core/execution/dispatch.h): the group's layout in the fusion buffer,
// the pipeline that packs, reduces and unpacks it on the host or a device, error feedback,
// debug error measurement and the stats of what ran.
#include <algorithm>
#include <cmath>

#include "core/execution/allreduce_pipeline.h"
#include "core/device/device_queue.h"
#include "core/execution/dispatch.h"
#include "core/policy/error_budget.h"
#include "common/error.h"

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

// The timeline arguments of what ran other than decided: a CERAR buffer's exact ring on
// non-finite input, a lossy wire's full width.
void addFallbacks(JsonObject& args, const RunStats& run) {
  if (run.nonFiniteFallback) args.add("non_finite_fallback", true);
  if (run.wireFallback) args.add("wire_fallback", true);
  if (run.flatFallback) args.add("flat_fallback", true);
}

// Where one tensor of a fusion group lies in the fusion buffer; entry is null for a joined
// rank's share (the op's identity).
struct Slot {
  Entry* entry;
  const Response* unit;
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
      slots.push_back(Slot{entries[u], units[u], k, offset, n});
      offset += n;
    }
  }
  return slots;
}

// Error feedback's key of a unit's k-th tensor: its set and name (a grouped unit names each).
std::string feedbackKey(int32_t set, const Response& unit, size_t k) {
  const std::string& name = k < unit.names.size() ? unit.names[k] : unit.names.front();
  return detail::concat(set, ":", name, k < unit.names.size() ? "" : detail::concat("#", k));
}

// One tensor of this rank alone: reduced in its output, saving the copy through the buffer.
bool reducesInPlace(const std::vector<const Response*>& units,
                    const std::vector<Entry*>& entries) {
  return units.size() == 1 && entries[0] != nullptr && entries[0]->inputs.size() == 1;
}


static_assert(size_t(Algorithm::kAdasum) + 1 == kAlgorithmCount, "RuntimeStats' algorithms");
static_assert(size_t(Wire::kInt8) + 1 == kWireCount, "RuntimeStats' wires");

// What one fused all-reduce adds to the stats. What ran: a CERAR decision that fell back on
// non-finite input ran the exact ring; Adasum counts as neither ring nor CERAR.
void countAllreduce(RuntimeStats& stats, const RunStats& run, const FusedGroup& decision,
                    Wire wire, int N, size_t tensors, int32_t set) {
  stats.fusedBuffers += 1;
  stats.tensorsReduced += tensors;
  stats.bytesSent += run.bytesSent;
  stats.bytesReceived += run.bytesReceived;
  const bool adasum = decision.algorithm == Algorithm::kAdasum;
  const bool ranCerar =
      decision.algorithm == Algorithm::kCerar && !run.nonFiniteFallback && !run.flatFallback;
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
  stats.hierarchicalBuffers += decision.hierarchical && !run.flatFallback ? 1 : 0;
  stats.lastComponents = ranCerar ? decision.components : N;
  const auto ran = size_t(adasum ? Algorithm::kAdasum : ranCerar ? Algorithm::kCerar
                                                                 : Algorithm::kRing);
  stats.allreduceBuffers[ran][size_t(ranWire)] += 1;
  stats.allreduceBytesSent[ran][size_t(ranWire)] += run.bytesSent;
  SetCounters& bySet = setCounters(stats, set);
  bySet.allreduceBuffers[ran][size_t(ranWire)] += 1;
  bySet.allreduceBytesSent[ran][size_t(ranWire)] += run.bytesSent;
}

}  // namespace

JsonObject Dispatcher::measureError(const std::byte* result, size_t total, DType dtype,
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
  return JsonObject().add("measured_error", error);
}

// Everything one fused all-reduce runs with, built once from the decision and the entries.
struct Dispatcher::AllreduceRun {
  const FusedGroup* decision = nullptr;
  const Description* description = nullptr;
  int N = 1;
  size_t tensors = 0;  // this rank's
  AllreduceOptions options;
  PipelineJob job;
  std::vector<PipelinePart> parts;
  bool onDevice = false;
  bool feed = false;     // error feedback keeps this buffer's residuals
  bool measure = false;  // debug error mode
  std::vector<ErrorFeedback::Part> fed;
  JsonObject args;       // the timeline's arguments: what was decided ...
  JsonObject errorArgs;  // ... and its predicted (and measured) error
};

Dispatcher::AllreduceRun Dispatcher::buildAllreduce(const std::vector<const Response*>& units,
                                                    const std::vector<Entry*>& entries,
                                                    const FusedGroup& decision,
                                                    RuntimeStats& stats) {
  const Description& d = units.front()->description;
  AllreduceRun r;
  r.decision = &decision;
  r.description = &d;
  r.N = group_->transport->size();
  for (Entry* e : entries) r.tensors += e ? e->inputs.size() : 0;
  size_t total = 0;
  for (const Response* unit : units) total += unit->description.elements();
  const ReduceOp op = reduceOpOf(d.op);
  // Everything below comes from the coordinator rank's decision, the same on every rank, and
  // negotiation agreed on the tensors: parameter agreement would only repeat it.
  AllreduceOptions& options = r.options;
  options.algorithm = decision.algorithm;
  options.components = decision.components;
  options.eps = decision.eps;
  options.op = op;
  options.verifyParameters = false;
  options.shareCorrection = decision.shareCorrection;
  options.wire = decision.wire;
  options.fp16Guard = decision.budgeted && options.wire == Wire::kFloat16;
  const bool adasum = decision.algorithm == Algorithm::kAdasum;
  const bool cerar = decision.algorithm == Algorithm::kCerar;
  const bool lossyWire = options.wire != Wire::kNone;
  // Adasum's schedule runs on the host: device tensors are copied in and out like a mixed
  // unit's.
  r.onDevice = units.front()->reducedOnDevice() && !adasum;
  // The predicted error of what was decided (relative to max sum_i |g_i|): CERAR's and a
  // lossy wire's always, the exact ring's under an error budget.
  if (cerar || lossyWire || decision.budgeted) {
    // Host by host, CERAR and the wires run across the hosts on the local ranks' slices.
    const int across = decision.hierarchical ? hierarchy_->hosts() : r.N;
    const size_t slice =
        decision.hierarchical ? hierarchicalSlices(total, r.N / across).back() : total;
    const double bound = reportedError({across, d.dtype, op, slice, false}, cerar,
                                       decision.components, decision.eps, options.wire,
                                       decision.budgeted ? errorBound_ : ErrorBound::kStrict);
    stats.predictedErrorMax = std::max(stats.predictedErrorMax, bound);
    stats.predictedErrorLast = bound;
    r.errorArgs.add("predicted_error", bound);
    if (decision.budgeted) r.errorArgs.add("budgeted", true);
  }
  r.measure = (cerar || lossyWire) && decision.measureError;
  r.args.add("algorithm", algorithmName(decision.algorithm))
      .add("c", decision.components)
      .add("eps", decision.eps)
      .add("bytes", total * dtypeSize(d.dtype))
      .add("tensors", units.size());
  if (lossyWire) r.args.add("wire", wireName(options.wire));
  if (decision.hierarchical) r.args.add("hierarchical", true);

  // The group's layout and steps, the same wherever it is reduced.
  PipelineJob& job = r.job;
  job.dtype = d.dtype;
  job.op = op;
  job.total = total;
  job.prescale = d.prescale;
  job.factor = d.postscale / (d.op == Op::kAverage ? double(r.N) : 1.0);
  // Error feedback: host float32 sums of the ring take their residuals; a CERAR buffer drops
  // them (CERAR's error is not a wire's loss).
  r.feed = errorFeedback_ && !r.onDevice && !adasum && d.dtype == DType::kFloat32 &&
           op == ReduceOp::kSum;
  if (reducesInPlace(units, entries) &&
      (r.onDevice || (entries[0]->inputs[0].device < 0 && entries[0]->outputs[0].device < 0))) {
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
      if (r.feed) {
        r.fed.push_back({feedbackKey(set_->id, *slot.unit, slot.tensor), in.shape, slot.offset,
                         slot.elements});
        if (decision.algorithm == Algorithm::kRing)
          part.residual = feedback_.residual(r.fed.back().key, in.shape);
      }
    }
    r.parts.push_back(part);
  }
  if (r.feed && lossyWire) {
    lost_.resize(total);
    job.lost = lost_.data();
  }
  if (r.measure) {  // debug error mode: the input and the result, on the host
    exactCopy_.resize(total * dtypeSize(d.dtype));
    staged_.resize(total * dtypeSize(d.dtype));
    job.input = exactCopy_.data();
    job.result = staged_.data();
  }
  return r;
}

JsonObject Dispatcher::measuredArgs(const AllreduceRun& r, const RunStats& run,
                                    RuntimeStats& stats) {
  if (!r.measure || run.nonFiniteFallback || run.wireFallback) return {};
  return measureError(staged_.data(), r.job.total, r.job.dtype, r.options, stats);
}

DeviceUnit Dispatcher::allreduceOnDevice(AllreduceRun r, OperationRows rows,
                                         RuntimeStats& stats) {
  const auto start = Clock::now();
  int device = -1;  // -1 for a joined rank without tensors of its own
  for (const PipelinePart& p : r.parts) device = p.in ? p.inDevice : device;
  DeviceQueue& queue = devices_.get(device);
  // The job owns what it waits for: a unit that timed out completes (and frees its entries)
  // while its work may still run.
  std::vector<DeviceEvent> ready;
  for (PipelinePart& p : r.parts) {
    if (p.ready) ready.insert(ready.end(), p.ready->begin(), p.ready->end());
    p.ready = nullptr;
  }
  auto ran = std::make_shared<RunStats>();
  queue.enqueue([ran, ready = std::move(ready), parts = std::move(r.parts), job = r.job,
                 options = r.options, byHost = r.decision->hierarchical](DeviceOps& ops) {
    for (const DeviceEvent& event : ready) ops.after(event);  // the producers' kernels
    DevicePipelineMemory memory(ops, options, byHost);
    *ran = runPipeline(memory, parts, job);
  });
  if (r.measure) {
    queue.run([](DeviceOps&) {});  // debug error mode waits for the downloads
    r.errorArgs.merge(measuredArgs(r, *ran, stats));
  }
  JsonObject args = std::move(r.args);
  args.add("device", true).merge(r.errorArgs);
  DeviceUnit unit;
  unit.mark = queue.record();
  // The run's figures are there once the mark is reached: counted then, before the handles
  // complete, with the timeline's events: the collective from dispatch to completion.
  unit.finish = [this, ran, rows = std::move(rows), start, decision = *r.decision,
                 wire = r.options.wire, N = r.N, tensors = r.tensors, set = set_->id,
                 collective = collectiveActivity(algorithmName(r.decision->algorithm),
                                                 *r.description),
                 args = std::move(args)](RuntimeStats& s) {
    const auto end = Clock::now();
    for (const auto& row : rows.starts) timeline_.record(row.first, collective, start, end);
    JsonObject ranArgs = args;
    addFallbacks(ranArgs, *ran);
    recordOperation(rows, end, ranArgs);
    countAllreduce(s, *ran, decision, wire, N, tensors, set);
  };
  return unit;
}

void Dispatcher::allreduceOnHost(AllreduceRun& r, const std::vector<const Response*>& units,
                                 const OperationRows& rows, RuntimeStats& stats) {
  HostPipelineMemory::Reducer reducer{&group_->communicator, r.options, r.N};
  if (r.decision->hierarchical) {
    CERAR_ENFORCE(hierarchy_ && set_->id == 0, "a host-by-host decision without host levels");
    reducer.hierarchy = hierarchy_.get();
  }
  if (r.decision->algorithm == Algorithm::kAdasum) {
    reducer.adasum = &adasum_;
    reducer.transport = group_->transport.get();
  }
  HostPipelineMemory memory(fusion_, devices_, reducer);
  const auto packStart = Clock::now();
  Clock::time_point reduceStart, unpackStart;
  const RunStats run = runPipeline(memory, r.parts, r.job, [&](const char* done) {
    (std::string(done) == "pack" ? reduceStart : unpackStart) = Clock::now();
  });
  const auto end = Clock::now();
  const bool lossyWire = r.options.wire != Wire::kNone;
  if (r.feed) feedback_.keep(r.fed, lossyWire && !run.wireFallback ? lost_.data() : nullptr);
  r.errorArgs.merge(measuredArgs(r, run, stats));
  record(units, kMemcpyInActivity, packStart, reduceStart);
  record(units, collectiveActivity(algorithmName(r.decision->algorithm), *r.description),
         reduceStart, unpackStart);
  record(units, kMemcpyOutActivity, unpackStart, end);
  addFallbacks(r.args.merge(r.errorArgs), run);
  recordOperation(rows, end, r.args);
  countAllreduce(stats, run, *r.decision, r.options.wire, r.N, r.tensors, set_->id);
}

DeviceUnit Dispatcher::allreduce(const std::vector<const Response*>& units,
                                 const std::vector<Entry*>& entries,
                                 const FusedGroup& decision, RuntimeStats& stats,
                                 OperationRows rows) {
  AllreduceRun run = buildAllreduce(units, entries, decision, stats);
  if (run.onDevice) return allreduceOnDevice(std::move(run), std::move(rows), stats);
  allreduceOnHost(run, units, rows, stats);
  return {};
}

}  // namespace cerar
