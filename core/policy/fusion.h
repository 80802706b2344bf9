// The fusion planner: which negotiated units share one fusion buffer. A pure function of the
// ordered response list, so every rank computes the same groups without talking.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "core/control/message.h"
#include "core/policy/selection.h"

namespace cerar {

// Whether `wire` may carry an all-reduce of `dtype` data with `op`: wireCarries
// (ops/codec/wire.h), never Adasum. The data must also be reduced in host memory. The one rule
// the planner, the Python layers (cerar._cerar.wire_carries) and the communicator apply.
bool wireMayCarry(Wire wire, DType dtype, Op op);

// Groups of indices into `responses`, in execution order (by each group's first index).
// Allreduce, reducescatter and allgather units with the same kind, dtype, op, scale factors,
// requested wire, reducing memory (Response::reducedOnDevice) and process set are packed in
// order into groups of at most `thresholdBytes` (next fit, so a group's order is the response
// order); a unit larger than the threshold (an allgather counts what it gathers), any other
// kind, and every error response go alone. A grouped unit is never split. thresholdBytes == 0
// disables fusion.
// `responses` by reference, in order.
UnitRefs unitRefs(const std::vector<Response>& responses);

std::vector<std::vector<size_t>> planFusion(const UnitRefs& responses, size_t thresholdBytes);
std::vector<std::vector<size_t>> planFusion(const std::vector<Response>& responses,
                                            size_t thresholdBytes);

// The coordinator rank's decisions for one cycle's units: planFusion's groups and, per
// allreduce group, the algorithm, c, eps and decoding from the cost model (`link`, the
// coordinator rank's probe) and the job's policy. A sum on the host with a lossy wire
// (the unit's request, else policy.wire) takes the exact ring with that wire. With an error
// budget (policy.maxError > 0 under auto) the rest is selectWithinBudget's choice, which may
// be a lossy wire the policy allows. Error units and other kinds carry no reduction decision.
// N is the size of each unit's process set (`setSize(id)`); a forced c is rounded up to a
// multiple of it (componentsForSet).
std::vector<FusedGroup> decideGroups(const UnitRefs& units,
                                     const std::function<int(int32_t set)>& setSize,
                                     size_t thresholdBytes, const LinkModel& link,
                                     const SelectionPolicy& policy);
// Every unit in a set of N ranks (set 0 of a job of N); the units by value (tests).
std::vector<FusedGroup> decideGroups(const std::vector<Response>& units, int N,
                                     size_t thresholdBytes, const LinkModel& link,
                                     const SelectionPolicy& policy);

}  // namespace cerar
