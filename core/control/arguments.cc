#include "core/control/arguments.h"

#include <cmath>
#include <unordered_set>

#include "core/execution/scaling.h"
#include "ops/algorithms/adasum.h"
#include "common/error.h"

namespace cerar {

Status argumentError(const std::string& why) { return Status(StatusCode::kInvalidArgument, why); }

Status checkNames(const std::vector<std::string>& names, const char* what) {
  if (names.empty()) return argumentError(std::string(what) + ": no tensors");
  std::unordered_set<std::string> seen;  // one name cannot repeat: filled for groups only
  for (const auto& name : names) {
    if (name.empty()) {
      return argumentError(std::string(what) + ": a tensor name must not be empty");
    }
    if (name.find('\x1f') != std::string::npos) {
      return argumentError(std::string(what) + " of '" + name +
                           "': the name contains the byte 0x1f");
    }
    if (names.size() > 1 && !seen.insert(name).second) {
      return argumentError(std::string(what) + ": the name '" + name +
                           "' appears twice in one group");
    }
  }
  return {};
}

Status checkTensor(const std::string& name, const Tensor& t) {
  for (int64_t dim : t.shape) {
    if (dim < 0) return argumentError("tensor '" + name + "': negative dimension");
  }
  if (t.data == nullptr && t.elements() > 0) {
    return argumentError("tensor '" + name + "': null data");
  }
  return {};
}

Status checkOp(const std::string& name, DType dtype, Op op, double prescale, double postscale,
               int N, const char* what) {
  if (op == Op::kAdasum) {
    // Every rank of the set sees the same N and dtype, so each fails alike before negotiating.
    if (!isAdasumDType(dtype)) {
      return argumentError(detail::concat(what, " of '", name, "': Adasum needs a "
                                          "floating-point dtype, got ", dtypeName(dtype)));
    }
    const Status sized = validateAdasumSize(N);
    if (!sized.ok()) {
      return argumentError(detail::concat(what, " of '", name, "': ", sized.message));
    }
  }
  if (op == Op::kAverage && !isFloatDType(dtype)) {
    return argumentError(detail::concat(what, " of '", name, "': average needs a "
                                        "floating-point dtype, got ", dtypeName(dtype),
                                        " (use sum)"));
  }
  if (!std::isfinite(prescale) || !std::isfinite(postscale)) {
    return argumentError(std::string(what) + " of '" + name + "': scale factors must be finite");
  }
  if ((prescale != 1.0 || postscale != 1.0) && !isFloatDType(dtype)) {
    return argumentError(detail::concat(what, " of '", name, "': prescale/postscale need "
                                        "a floating-point dtype, got ", dtypeName(dtype)));
  }
  return {};
}

Status checkMember(const SetRef& set, int32_t id, int rank,
                   const std::string& what) {
  if (!set) return argumentError(detail::concat(what, ": there is no process set ", id));
  if (!set->contains(rank)) {
    std::string ranks;
    for (int member : set->ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(member);
    return argumentError(detail::concat(what, ": rank ", rank, " is not in process set ", id,
                                        " (ranks ", ranks, ")"));
  }
  return {};
}

Status checkReduction(const std::vector<std::string>& names, const std::vector<Tensor>& inputs,
                      const std::vector<Tensor>& outputs, Description& d, int setRank,
                      int setSize) {
  const bool scatter = d.kind == Kind::kReducescatter;
  const char* what = scatter ? "reducescatter" : "allreduce";
  Status invalid = checkNames(names, what);
  if (invalid.ok() && (inputs.size() != names.size() || outputs.size() != names.size())) {
    invalid = argumentError(detail::concat(scatter ? "reducescatter: " : "grouped allreduce: ",
                                           names.size(), " names, ", inputs.size(),
                                           " inputs and ", outputs.size(), " outputs"));
  }
  d.shapes.reserve(inputs.size());
  for (size_t i = 0; invalid.ok() && i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    const Tensor& out = outputs[i];
    if (i == 0) d.dtype = in.dtype, d.onDevice = in.device >= 0;
    invalid = checkTensor(names[i], in);
    if (!invalid.ok()) break;
    if (scatter && in.shape.empty()) {
      return argumentError("reducescatter of '" + names[i] +
                           "': a scalar has no first dimension to scatter");
    }
    std::vector<int64_t> scattered;  // an allreduce's output has the input's shape: no copy
    if (scatter) {
      scattered = in.shape;
      scattered[0] = scatterRows(scattered[0], setRank, setSize);
    }
    const std::vector<int64_t>& expected = scatter ? scattered : in.shape;
    if (out.dtype != in.dtype || out.shape != expected || out.device != in.device ||
        (out.data == nullptr && out.elements() > 0)) {
      invalid = argumentError(
          scatter ? detail::concat("reducescatter of '", names[i], "': the output must have "
                                   "the input's dtype and device and this rank's share of the "
                                   "first dimension (", expected[0], " of ", in.shape[0],
                                   " rows)")
                  : "allreduce of '" + names[i] + "': the output must match the input's "
                    "dtype, shape and device");
    } else if (in.dtype != d.dtype || in.device != inputs[0].device) {
      invalid = argumentError(detail::concat(scatter ? "grouped reducescatter: '"
                                                     : "grouped allreduce: '",
                                             names[i], "' differs in dtype or device from '",
                                             names[0], "'; a group is one ",
                                             scatter ? "unit" : "fusion unit"));
    }
    d.shapes.push_back(in.shape);
  }
  return invalid;
}

Status checkReductionCall(const std::vector<std::string>& names, const std::vector<Tensor>& inputs,
                          const std::vector<Tensor>& outputs, Description& d,
                          const SetRef& set, int rank) {
  const bool scatter = d.kind == Kind::kReducescatter;
  const char* what = scatter ? "reducescatter" : "allreduce";
  // The refusal's context is built only for a refusal: this runs on every enqueue.
  Status invalid = set && set->contains(rank)
                       ? Status()
                       : checkMember(set, d.processSet, rank,
                                     detail::concat(what, " of '",
                                                    names.empty() ? std::string() : names.front(),
                                                    "'"));
  if (invalid.ok()) {
    invalid = checkReduction(names, inputs, outputs, d, set->rankOf(rank), set->size());
  }
  if (invalid.ok() && scatter && d.op == Op::kAdasum) {
    invalid = argumentError("reducescatter of '" + names.front() +
                            "': Adasum is an all-reduce only");
  }
  if (invalid.ok()) {
    invalid = checkOp(names.front(), d.dtype, d.op, d.prescale, d.postscale, set->size(), what);
  }
  return invalid;
}

Status checkAllgatherCall(const std::vector<std::string>& names,
                          const std::vector<Tensor>& inputs, Description& d,
                          const SetRef& set, int rank) {
  Status invalid = checkMember(set, d.processSet, rank,
                               "allgather of '" + (names.empty() ? "" : names[0]) + "'");
  if (invalid.ok()) invalid = checkNames(names, "allgather");
  if (invalid.ok() && inputs.size() != names.size()) {
    invalid = argumentError(detail::concat("grouped allgather: ", names.size(), " names and ",
                                           inputs.size(), " inputs"));
  }
  for (size_t i = 0; invalid.ok() && i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (i == 0) d.dtype = in.dtype, d.onDevice = in.device >= 0;
    invalid = checkTensor(names[i], in);
    if (invalid.ok() && in.shape.empty()) {
      invalid = argumentError("allgather of '" + names[i] +
                              "': a scalar has no first dimension to concatenate");
    } else if (invalid.ok() && (in.dtype != d.dtype || in.device != inputs[0].device)) {
      invalid = argumentError("grouped allgather: '" + names[i] + "' differs in dtype or "
                              "device from '" + names[0] + "'; a group is one unit");
    }
    d.shapes.push_back(in.shape);
  }
  return invalid;
}

Status checkAlltoallCall(const std::string& name, const Tensor& input,
                         std::vector<int64_t> splits, Description& d,
                         const SetRef& set, int rank) {
  Status invalid = checkMember(set, d.processSet, rank, "alltoall of '" + name + "'");
  const int n = set ? set->size() : 1;
  if (invalid.ok()) invalid = checkNames({name}, "alltoall");
  if (invalid.ok()) invalid = checkTensor(name, input);
  if (invalid.ok() && input.shape.empty()) {
    invalid = argumentError("alltoall of '" + name +
                            "': a scalar has no first dimension to split");
  }
  const int64_t rows = input.shape.empty() ? 0 : input.shape[0];
  if (invalid.ok() && splits.empty()) {
    if (rows % n != 0) {
      invalid = argumentError(detail::concat(
          "alltoall of '", name, "': without splits the first dimension (", rows,
          ") must be a multiple of the number of ranks (", n, ")"));
    }
    splits.assign(n, rows / n);
  }
  if (invalid.ok() && int(splits.size()) != n) {
    invalid = argumentError(detail::concat("alltoall of '", name, "': ", splits.size(),
                                           " splits for ", n, " ranks"));
  }
  int64_t total = 0;
  for (int64_t rowsTo : splits) {
    if (invalid.ok() && rowsTo < 0) {
      invalid = argumentError("alltoall of '" + name + "': a negative split");
    }
    total += rowsTo;
  }
  if (invalid.ok() && total > rows) {
    invalid = argumentError(detail::concat("alltoall of '", name, "': the splits sum to ",
                                           total, ", more than the first dimension (", rows,
                                           ")"));
  }
  d.splits = std::move(splits);
  return invalid;
}

Status checkBroadcastCall(const std::string& name, const Tensor& tensor, const Description& d,
                          const SetRef& set, int rank, int jobSize) {
  Status invalid = checkMember(set, d.processSet, rank, "broadcast of '" + name + "'");
  if (invalid.ok()) invalid = checkNames({name}, "broadcast");
  if (invalid.ok()) invalid = checkTensor(name, tensor);
  const int root = d.root;
  if (invalid.ok() && (root < 0 || root >= jobSize)) {
    invalid = argumentError(detail::concat("broadcast of '", name, "': root ", root,
                                           " out of range for ", jobSize, " ranks"));
  } else if (invalid.ok() && !set->contains(root)) {
    invalid = argumentError(detail::concat("broadcast of '", name, "': root ", root,
                                           " is not in process set ", d.processSet));
  }
  return invalid;
}

Status checkSetRemoval(int32_t id) {
  if (id > 0) return {};
  return argumentError(detail::concat(
      "process set ", id, " cannot be removed (0 is every rank; others count from 1)"));
}

}  // namespace cerar
