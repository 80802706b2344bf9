// Argument checks of the runtime's entry points (core/runtime.cc): each returns ok, or a
// kInvalidArgument status with the reason. Every rank checks its own call before anything is
// negotiated, so a call that is wrong on every rank fails on every rank without talking.
#pragma once

#include <string>
#include <vector>

#include "core/message.h"
#include "core/process_sets.h"
#include "core/runtime.h"

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
Status checkMember(const std::optional<ProcessSet>& set, int32_t id, int rank,
                   const std::string& what);

// A reduction of several tensors as one unit (a grouped allreduce or reducescatter): the
// names, the inputs, and outputs whose shapes are the inputs' (allreduce) or this rank's share
// of their first dimension among `setRank` of `setSize` (reducescatter); one dtype and device.
// Fills d.dtype, d.onDevice and d.shapes.
Status checkReduction(const std::vector<std::string>& names, const std::vector<Tensor>& inputs,
                      const std::vector<Tensor>& outputs, Description& d, int setRank,
                      int setSize);

}  // namespace cerar
