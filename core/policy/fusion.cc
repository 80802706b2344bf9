#include "core/policy/fusion.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/execution/dispatch.h"
#include "core/control/process_sets.h"
#include "core/policy/error_budget.h"

namespace cerar {

namespace {

// The bytes a unit occupies in a fusion buffer: an allgather's is what it gathers.
size_t fusedBytes(const Response& r) {
  const Description& d = r.description;
  if (d.kind != Kind::kAllgather || d.shapes.empty()) return d.bytes();
  const size_t tensors = d.shapes.size();
  size_t bytes = 0;
  for (size_t i = 0; i < r.firstDims.size(); ++i) {
    std::vector<int64_t> row = d.shapes[i % tensors];
    if (row.empty()) continue;
    row[0] = r.firstDims[i];
    bytes += shapeElements(row) * dtypeSize(d.dtype);
  }
  return bytes;
}

// Whether `wire` can carry a unit: its data, in host memory.
bool wireFits(const Response& unit, Wire wire) {
  const Description& d = unit.description;
  return wireMayCarry(wire, d.dtype, d.op) && !unit.reducedOnDevice();
}

// A unit's wire: its own request, else the job's forced one (no budget), where it fits.
Wire wireFor(const Response& unit, const SelectionPolicy& policy) {
  const Description& d = unit.description;
  const bool budget = policy.maxError > 0 && policy.algorithm == "auto";
  const Wire wire = d.wire != Wire::kNone ? d.wire : budget ? Wire::kNone : policy.wire;
  return wireFits(unit, wire) ? wire : Wire::kNone;
}

// The flat choice on N ranks for `total` elements: a sum on the host with a lossy wire (the
// unit's request, else the job's) takes the exact ring with that wire; with an error budget
// (policy.maxError > 0 under auto) selectWithinBudget chooses, which may take a lossy wire the
// policy allows; else the cost model's algorithm. A forced c is rounded up to a multiple of N.
Selection chooseFlat(const Response& first, int N, size_t total, const LinkModel& link,
                     const SelectionPolicy& jobPolicy) {
  const Description& d = first.description;
  SelectionPolicy policy = jobPolicy;
  policy.components = componentsForSet(jobPolicy.components, N);
  const Wire wire = wireFor(first, policy);
  if (wire != Wire::kNone) {
    Selection ring{Algorithm::kRing, N, 0,
                   ringSeconds(N, double(total) * dtypeSize(d.dtype), link)};
    ring.wire = wire;
    return ring;
  }
  return policy.maxError > 0 && policy.algorithm == "auto"
             ? selectWithinBudget({N, d.dtype, reduceOpOf(d.op), total,
                                   !first.reducedOnDevice()},
                                  link, policy)
             : selectAlgorithm(N, d.dtype, reduceOpOf(d.op), total, link, policy);
}

// An all-reduce's choice: flat, or host by host where the job is layered and the sum is the
// whole job's, in host or device memory ("1"; "auto" where the model predicts it faster). Host
// by host, the step across hosts is chosen as a flat one on H ranks for one local rank's
// slice, over the host's link shared by its L rings; CERAR's c, rounds and error bound follow
// H.
Selection chooseAllreduce(const Response& first, int N, size_t total, const LinkModel& link,
                          const SelectionPolicy& policy) {
  const Selection flat = chooseFlat(first, N, total, link, policy);
  const int H = policy.hosts, L = policy.ranksPerHost;
  const bool layered = H > 1 && L > 1 && H * L == N && first.description.processSet == 0 &&
                       policy.hierarchical != "0";
  if (!layered) return flat;
  Selection across = chooseFlat(first, H, (total + size_t(L) - 1) / size_t(L),
                                sharedHostLink(link, L), policy);
  across.predictedSeconds +=
      localSeconds(double(total) * dtypeSize(first.description.dtype), L, link);
  across.hierarchical = true;
  if (policy.hierarchical == "1") return across;
  // GPU buffers only when asked for: the link probe times the hosts' links and shared memory,
  // not the GPUs' links inside a host.
  if (first.reducedOnDevice()) return flat;
  // An approximate flat choice must beat an exact host-by-host one by minGain, as CERAR must
  // beat the ring: a near tie is not worth the error.
  const bool exactAcross = across.algorithm == Algorithm::kRing && across.wire == Wire::kNone;
  const bool exactFlat = flat.algorithm == Algorithm::kRing && flat.wire == Wire::kNone;
  const double margin = exactAcross && !exactFlat ? 1.0 - policy.minGain : 1.0;
  return flat.predictedSeconds < margin * across.predictedSeconds ? flat : across;
}

}  // namespace

bool wireMayCarry(Wire wire, DType dtype, Op op) {
  return wire == Wire::kNone || (op != Op::kAdasum && wireCarries(wire, dtype, reduceOpOf(op)));
}

UnitRefs unitRefs(const std::vector<Response>& responses) {
  UnitRefs refs;
  refs.reserve(responses.size());
  for (const Response& r : responses) refs.push_back(&r);
  return refs;
}

std::vector<std::vector<size_t>> planFusion(const std::vector<Response>& responses,
                                            size_t thresholdBytes) {
  return planFusion(unitRefs(responses), thresholdBytes);
}

std::vector<std::vector<size_t>> planFusion(const UnitRefs& responses, size_t thresholdBytes) {
  using Key = std::tuple<Kind, DType, Op, bool, double, double, Wire, int32_t>;
  struct Open {
    size_t group;
    size_t bytes;
  };
  std::vector<std::vector<size_t>> groups;
  std::map<Key, Open> open;  // the group of each key still being filled
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = *responses[i];
    const Description& d = r.description;
    const size_t bytes = fusedBytes(r);
    const bool reduces = d.kind == Kind::kAllreduce || d.kind == Kind::kReducescatter ||
                         d.kind == Kind::kAllgather;
    const bool fusible = thresholdBytes > 0 && r.error.empty() && reduces &&
                         bytes <= thresholdBytes;
    if (!fusible) {
      groups.push_back({i});
      continue;
    }
    const Key key{d.kind,      d.dtype,     d.op,   r.reducedOnDevice(),
                  d.prescale,  d.postscale, d.wire, d.processSet};
    auto it = open.find(key);
    if (it != open.end() && it->second.bytes + bytes <= thresholdBytes) {
      groups[it->second.group].push_back(i);
      it->second.bytes += bytes;
    } else {
      open[key] = Open{groups.size(), bytes};
      groups.push_back({i});
    }
  }
  return groups;  // already ordered by first index: groups are opened in response order
}

std::vector<FusedGroup> decideGroups(const std::vector<Response>& units, int N,
                                     size_t thresholdBytes, const LinkModel& link,
                                     const SelectionPolicy& policy) {
  return decideGroups(unitRefs(units), [N](int32_t) { return N; }, thresholdBytes, link, policy);
}

std::vector<FusedGroup> decideGroups(const UnitRefs& units,
                                     const std::function<int(int32_t set)>& setSize,
                                     size_t thresholdBytes, const LinkModel& link,
                                     const SelectionPolicy& jobPolicy) {
  std::vector<FusedGroup> decided;
  for (const auto& members : planFusion(units, thresholdBytes)) {
    const Response& first = *units[members.front()];
    const Description& d = first.description;
    const int N = setSize(d.processSet);
    FusedGroup group;
    group.algorithm = Algorithm::kRing;
    group.components = N;
    for (size_t index : members) group.members.push_back(static_cast<uint32_t>(index));
    // Adasum has its own schedule (ops/algorithms/adasum.h), full width: nothing to select.
    if (first.error.empty() && d.kind == Kind::kAllreduce && d.op == Op::kAdasum) {
      group.algorithm = Algorithm::kAdasum;
    } else if (first.error.empty() && d.kind == Kind::kAllreduce) {
      size_t total = 0;
      for (size_t index : members) total += units[index]->description.elements();
      const Selection choice = chooseAllreduce(first, N, total, link, jobPolicy);
      group.algorithm = choice.algorithm;
      group.components = choice.components;
      group.eps = choice.eps;
      group.wire = choice.wire;
      group.budgeted = choice.budgeted;
      group.hierarchical = choice.hierarchical;
      const bool cerar = choice.algorithm == Algorithm::kCerar;
      // Share correction is a host pass over the decoded buffer; device buffers skip it.
      group.shareCorrection = cerar && jobPolicy.shareCorrection && !first.reducedOnDevice();
      group.measureError = (cerar || choice.wire != Wire::kNone) && jobPolicy.measureError;
    }
    decided.push_back(std::move(group));
  }
  return decided;
}

}  // namespace cerar
