#include "core/dispatch.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/scaling.h"
#include "ops/algorithms/share_correction.h"
#include "ops/collectives.h"
#include "ops/common/error.h"

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

}  // namespace

ReduceOp reduceOpOf(Op op) {
  switch (op) {
    case Op::kMin: return ReduceOp::kMin;
    case Op::kMax: return ReduceOp::kMax;
    default: return ReduceOp::kSum;
  }
}

Dispatcher::Dispatcher(std::shared_ptr<Transport> transport, SelectionPolicy policy,
                       Timeline& timeline)
    : transport_(transport), communicator_(std::move(transport)), policy_(std::move(policy)),
      timeline_(timeline) {}

void Dispatcher::record(const std::vector<const Response*>& units, const char* phase,
                        Clock::time_point start, Clock::time_point end, const std::string& args) {
  if (!timeline_.active()) return;
  for (const Response* unit : units) {
    for (const auto& name : unit->names) timeline_.record(name, phase, start, end, args);
  }
}

void Dispatcher::run(const std::vector<const Response*>& units,
                     const std::vector<Entry*>& entries, RuntimeStats& stats) {
  CERAR_ENFORCE(!units.empty() && units.size() == entries.size(), "dispatch: bad group");
  const Response& first = *units.front();
  switch (first.description.kind) {
    case Kind::kAllreduce: return allreduce(units, entries, stats);
    case Kind::kAllgather: return allgather(first, entries.front(), stats);
    case Kind::kBroadcast: return broadcast(first, entries.front(), stats);
    case Kind::kBarrier: return;  // the negotiation itself was the barrier
  }
}

void Dispatcher::allreduce(const std::vector<const Response*>& units,
                           const std::vector<Entry*>& entries, RuntimeStats& stats) {
  const Description& d = units.front()->description;
  const size_t elementSize = dtypeSize(d.dtype);
  const ReduceOp op = reduceOpOf(d.op);
  size_t total = 0;
  for (const Response* unit : units) total += unit->description.elements();

  // One tensor of this rank: reduce in its output, saving the copy through the fusion buffer.
  const bool direct = units.size() == 1 && entries[0] != nullptr && entries[0]->inputs.size() == 1;
  std::byte* buffer;
  const auto packStart = Clock::now();
  if (direct) {
    const Entry& e = *entries[0];
    buffer = static_cast<std::byte*>(e.outputs[0].data);
    scaledCopy(d.dtype, e.inputs[0].data, buffer, total, d.prescale);
  } else {
    if (fusion_.size() < total * elementSize) fusion_.resize(total * elementSize);
    buffer = fusion_.data();
    size_t offset = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      for (size_t k = 0; k < units[u]->description.shapes.size(); ++k) {
        const size_t n = shapeElements(units[u]->description.shapes[k]);
        std::byte* at = buffer + offset * elementSize;
        if (entries[u] != nullptr) {
          scaledCopy(d.dtype, entries[u]->inputs[k].data, at, n, d.prescale);
        } else {
          fillIdentity(d.dtype, op, at, n);  // a joined rank
        }
        offset += n;
      }
    }
  }
  const auto reduceStart = Clock::now();
  record(units, "MEMCPY_IN", packStart, reduceStart);

  const int N = transport_->size();
  const Selection choice = selectAlgorithm(N, d.dtype, op, total, link_, policy_);
  AllreduceOptions options;
  options.algorithm = choice.algorithm;
  options.components = choice.components;
  options.eps = choice.eps;
  options.op = op;
  options.verifyParameters = false;  // negotiation already agreed on every parameter
  options.shareCorrection = policy_.shareCorrection;
  const bool cerar = choice.algorithm == Algorithm::kCerar;
  const bool measure = cerar && policy_.measureError;
  if (measure) {
    exactCopy_.assign(buffer, buffer + total * elementSize);
  }
  const RunStats run = communicator_.allreduce(buffer, total, d.dtype, options);
  const auto unpackStart = Clock::now();
  std::string errorArgs;
  if (cerar) {
    const double bound = predictedErrorBound(N, choice.components, choice.eps, d.dtype);
    stats.predictedErrorMax = std::max(stats.predictedErrorMax, bound);
    errorArgs = detail::concat(", \"predicted_error\": ", bound);
  }
  if (measure) {
    // Every rank runs the same extra ring (the knob is the same everywhere), so it pairs up.
    AllreduceOptions exact = options;
    exact.algorithm = Algorithm::kRing;
    communicator_.allreduce(exactCopy_.data(), total, d.dtype, exact);
    const double error = maxRelativeDifference(d.dtype, buffer, exactCopy_.data(), total);
    stats.measuredErrorLast = error;
    stats.measuredErrorMax = std::max(stats.measuredErrorMax, error);
    stats.measuredErrorSum += error;
    stats.measuredBuffers += 1;
    errorArgs += detail::concat(", \"measured_error\": ", error);
  }
  record(units, "ALLREDUCE", reduceStart, unpackStart,
         detail::concat("\"algorithm\": \"", algorithmName(choice.algorithm),
                        "\", \"c\": ", choice.components, ", \"eps\": ", choice.eps,
                        ", \"bytes\": ", total * elementSize, ", \"tensors\": ", units.size(),
                        errorArgs));

  const double factor = d.postscale / (d.op == Op::kAverage ? double(N) : 1.0);
  if (direct) {
    scaledCopy(d.dtype, buffer, buffer, total, factor);
  } else {
    size_t offset = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      for (size_t k = 0; k < units[u]->description.shapes.size(); ++k) {
        const size_t n = shapeElements(units[u]->description.shapes[k]);
        if (entries[u] != nullptr) {
          scaledCopy(d.dtype, buffer + offset * elementSize, entries[u]->outputs[k].data, n,
                     factor);
        }
        offset += n;
      }
    }
  }
  record(units, "MEMCPY_OUT", unpackStart, Clock::now());

  stats.fusedBuffers += 1;
  for (Entry* e : entries) stats.tensorsReduced += e ? e->inputs.size() : 0;
  stats.bytesSent += run.bytesSent;
  (choice.algorithm == Algorithm::kRing ? stats.ringBuffers : stats.cerarBuffers) += 1;
}

void Dispatcher::allgather(const Response& unit, Entry* entry, RuntimeStats& stats) {
  const Description& d = unit.description;
  const auto& shape = d.shapes.at(0);
  size_t rowBytes = dtypeSize(d.dtype);
  for (size_t i = 1; i < shape.size(); ++i) rowBytes *= static_cast<size_t>(shape[i]);
  const int N = transport_->size();
  std::vector<size_t> blocks(N);
  size_t offset = 0, total = 0, rows = 0;
  for (int r = 0; r < N; ++r) {
    blocks[r] = static_cast<size_t>(unit.firstDims.at(r)) * rowBytes;
    if (r < transport_->rank()) offset += blocks[r];
    total += blocks[r];
    rows += static_cast<size_t>(unit.firstDims[r]);
  }
  std::vector<std::byte> scratch;
  std::vector<std::byte>& out = entry ? entry->state->output : scratch;
  const auto start = Clock::now();
  out.resize(total);
  if (entry && blocks[transport_->rank()] > 0) {
    std::memcpy(out.data() + offset, entry->inputs[0].data, blocks[transport_->rank()]);
  }
  const auto gatherStart = Clock::now();
  record({&unit}, "MEMCPY_IN", start, gatherStart);
  ringAllgather(*transport_, out.data(), blocks);
  record({&unit}, "ALLGATHER", gatherStart, Clock::now(),
         detail::concat("\"algorithm\": \"ring\", \"bytes\": ", total));
  if (entry) {
    entry->state->outputShape = shape;
    entry->state->outputShape[0] = static_cast<int64_t>(rows);
  }
  stats.bytesSent += total - blocks[transport_->rank()];
}

void Dispatcher::broadcast(const Response& unit, Entry* entry, RuntimeStats& stats) {
  const Description& d = unit.description;
  const size_t bytes = d.bytes();
  void* data = nullptr;
  if (entry) {
    data = entry->outputs[0].data;
  } else {
    if (fusion_.size() < bytes) fusion_.resize(bytes);  // a joined rank relays root's bytes
    data = fusion_.data();
  }
  const auto start = Clock::now();
  chainBroadcast(*transport_, data, bytes, d.root);
  record({&unit}, "BROADCAST", start, Clock::now(),
         detail::concat("\"algorithm\": \"chain\", \"root\": ", d.root, ", \"bytes\": ", bytes));
  const int position = (transport_->rank() - d.root + transport_->size()) % transport_->size();
  if (position < transport_->size() - 1) stats.bytesSent += bytes;
}

}  // namespace cerar
