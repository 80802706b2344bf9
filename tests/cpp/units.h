// Negotiation units for the tests of the coordinator's pure parts (negotiation, cache, fusion).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/control/message.h"

namespace cerar::testing {

inline Request request(const std::string& name, std::vector<int64_t> shape,
                Kind kind = Kind::kAllreduce, Op op = Op::kSum) {
  Request r;
  r.names = {name};
  r.description.kind = kind;
  r.description.op = op;
  r.description.shapes = {std::move(shape)};
  return r;
}

// A negotiated unit of one tensor: the response to request(name, shape).
inline Response unitOf(const std::string& name, std::vector<int64_t> shape) {
  return Response{{name}, request(name, std::move(shape)).description, {}, "", {}};
}

}  // namespace cerar::testing
