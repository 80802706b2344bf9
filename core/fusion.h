// The fusion planner: which negotiated units share one fusion buffer. A pure function of the
// ordered response list, so every rank computes the same groups without talking.
#pragma once

#include <cstddef>
#include <vector>

#include "core/message.h"

namespace cerar {

// Groups of indices into `responses`, in execution order (by each group's first index).
// Allreduce units with the same dtype, op, scale factors and reducing memory
// (Response::reducedOnDevice) are packed in order into groups of at most `thresholdBytes`
// (next fit, so a group's order is the response order); a unit larger than the threshold,
// any other kind, and every error response go alone. A grouped allreduce is one unit and is
// never split. thresholdBytes == 0 disables fusion.
std::vector<std::vector<size_t>> planFusion(const std::vector<Response>& responses,
                                            size_t thresholdBytes);

}  // namespace cerar
