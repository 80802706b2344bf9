// Python objects as cerar::Tensor views, and the Python side of an operation's Handle.
// No logic beyond conversion: every decision is the runtime's (core/runtime.h).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/runtime.h"

namespace cerar::bindings {
namespace py = pybind11;

// A tensor given by address (torch's data_ptr(), CUDA memory, anything without the buffer
// protocol). Holds `owner` so the memory outlives every operation that uses it.
struct RawTensor {
  py::object owner;
  uintptr_t ptr = 0;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  int device = -1;
  uintptr_t stream = 0;  // CUDA: the producers' cudaStream_t
};

// What an operation keeps alive until it ends: the Python objects and the buffer views.
struct Keep {
  py::object first;  // the common call's one tensor, held without a vector
  std::vector<py::object> more;
  std::vector<std::unique_ptr<py::buffer_info>> buffers;

  void hold(py::object object) {
    if (!first) {
      first = std::move(object);
    } else {
      more.push_back(std::move(object));
    }
  }
};

// Views `obj` (a RawTensor, or any C-contiguous object with the buffer protocol, e.g. a numpy
// array) as a Tensor without copying; records in `keep` what must stay alive.
// Throws TypeError for an unsupported type or dtype, ValueError for a non-contiguous buffer.
Tensor viewTensor(py::handle obj, bool writable, Keep& keep);

// numpy's dtype for `dtype` (bfloat16, which numpy lacks, comes back as uint16 bits).
py::dtype numpyDType(DType dtype);

// One asynchronous operation, as Python sees it. While the operation runs it keeps the
// tensors alive; if Python drops it early, the tensors are parked until the operation ends.
class PyHandle {
 public:
  PyHandle(Handle handle, Keep keep, DType dtype);
  ~PyHandle();
  PyHandle(const PyHandle&) = delete;
  PyHandle& operator=(const PyHandle&) = delete;

  bool poll() const;
  // Waits with the GIL released (still answering Ctrl-C); raises CerarError on failure.
  // With a timeout, returns False if the operation is still running then.
  bool wait(std::optional<double> timeoutSeconds);
  // allgather, alltoall: the gathered tensor as a new numpy array.
  py::array output() const;
  // alltoall: the rows received from each rank.
  std::vector<int64_t> receivedSplits() const;
  int lastJoinedRank() const;
  int processSetId() const;

 private:
  Handle handle_;
  std::optional<Keep> keep_;
  DType dtype_;
};

// Releases the parked tensors of operations that have ended (called with the GIL held).
void pruneParked();

// Defines CerarError and its subclasses in `m` and translates cerar::Error to them
// (bindings/errors.cc).
void registerErrors(py::module_& m);

}  // namespace cerar::bindings
