// Argument checks of the runtime's entry points (core/runtime.cc): each returns ok, or a
// kInvalidArgument status with the reason. Every rank checks its own call before anything is
// negotiated, so a call that is wrong on every rank fails on every rank without talking.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/control/message.h"
#include "core/control/process_sets.h"
#include "core/types.h"

namespace cerar {

Status argumentError(const std::string& why);
// At least one name; none empty, none with the byte 0x1f, none twice.
Status checkNames(const std::vector<std::string>& names, const char* what);
// No negative dimension; data unless empty.
Status checkTensor(const std::string& name, const Tensor& t);
// The op and scale factors for `dtype` on N ranks (Adasum: a power of two).
Status checkOp(const std::string& name, DType dtype, Op op, double prescale, double postscale,
               int N, const char* what = "allreduce");
// `set` (process set `id`, absent when unknown) has `rank`: the caller may run `what` in it.
Status checkMember(const SetRef& set, int32_t id, int rank,
                   const std::string& what);

// The checks of one call, in process set d.processSet as this rank knows it (`set`, absent when
// unknown), on `rank` (global). Each fills `d` as far as the call gets.
// A grouped allreduce or reducescatter (d.kind, d.op, d.prescale, d.postscale set).
Status checkReductionCall(const std::vector<std::string>& names, const std::vector<Tensor>& inputs,
                          const std::vector<Tensor>& outputs, Description& d,
                          const SetRef& set, int rank);
// A grouped allgather: one dtype and device, no scalars.
Status checkAllgatherCall(const std::vector<std::string>& names,
                          const std::vector<Tensor>& inputs, Description& d,
                          const SetRef& set, int rank);
// An alltoall: d.splits gets `splits`, or the first dimension split equally when empty.
Status checkAlltoallCall(const std::string& name, const Tensor& input,
                         std::vector<int64_t> splits, Description& d,
                         const SetRef& set, int rank);
// A broadcast from global rank d.root of `jobSize`.
Status checkBroadcastCall(const std::string& name, const Tensor& tensor, const Description& d,
                          const SetRef& set, int rank, int jobSize);
// Removing process set `id` (0, every rank, stays).
Status checkSetRemoval(int32_t id);

// A reduction of several tensors as one unit (a grouped allreduce or reducescatter): the
// names, the inputs, and outputs whose shapes are the inputs' (allreduce) or this rank's share
// of their first dimension among `setRank` of `setSize` (reducescatter); one dtype and device.
// Fills d.dtype, d.onDevice and d.shapes.
Status checkReduction(const std::vector<std::string>& names, const std::vector<Tensor>& inputs,
                      const std::vector<Tensor>& outputs, Description& d, int setRank,
                      int setSize);

}  // namespace cerar
