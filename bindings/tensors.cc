#include "bindings/tensors.h"

#include <chrono>
#include <cstring>
#include <string>
#include <utility>

namespace cerar::bindings {
namespace {

// Operations whose Python handle went away before they ended. Never destroyed: it may still
// hold Python objects when the interpreter finalises, and dropping them then would crash.
std::vector<std::pair<Handle, Keep>>& parked() {
  static auto* list = new std::vector<std::pair<Handle, Keep>>();
  return *list;
}

DType dtypeFromFormat(const py::buffer_info& info) {
  std::string format = info.format;
  size_t at = 0;
  while (at < format.size() && (format[at] == '@' || format[at] == '=' || format[at] == '<')) {
    ++at;
  }
  if (at + 1 == format.size()) {
    const char c = format[at];
    const auto size = info.itemsize;
    if (c == 'f' && size == 4) return DType::kFloat32;
    if (c == 'd' && size == 8) return DType::kFloat64;
    if (c == 'e' && size == 2) return DType::kFloat16;
    if (c == 'B' && size == 1) return DType::kUInt8;
    if ((c == 'i' || c == 'l' || c == 'q') && size == 4) return DType::kInt32;
    if ((c == 'i' || c == 'l' || c == 'q') && size == 8) return DType::kInt64;
  }
  throw py::type_error("cerar: unsupported buffer format '" + info.format + "' (itemsize " +
                       std::to_string(info.itemsize) +
                       "); supported: float32, float64, float16, int32, int64, uint8");
}

bool cContiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expected) return false;
    expected *= info.shape[d];
  }
  return true;
}

}  // namespace

Tensor viewTensor(py::handle obj, bool writable, Keep& keep) {
  Tensor tensor;
  if (py::isinstance<RawTensor>(obj)) {
    const auto& raw = obj.cast<const RawTensor&>();
    tensor.data = reinterpret_cast<void*>(raw.ptr);
    tensor.dtype = raw.dtype;
    tensor.shape = raw.shape;
    tensor.device = raw.device;
    tensor.stream = reinterpret_cast<void*>(raw.stream);
    keep.hold(py::reinterpret_borrow<py::object>(obj));
    return tensor;
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    throw py::type_error(std::string("cerar: expected a numpy array or a buffer, got ") +
                         std::string(py::str(obj.get_type().attr("__name__"))));
  }
  auto info = std::make_unique<py::buffer_info>(
      py::reinterpret_borrow<py::buffer>(obj).request(writable));
  if (!cContiguous(*info)) {
    throw py::value_error("cerar: the tensor must be C-contiguous");
  }
  tensor.data = info->ptr;
  tensor.dtype = dtypeFromFormat(*info);
  tensor.shape.assign(info->shape.begin(), info->shape.end());
  tensor.device = -1;
  keep.buffers.push_back(std::move(info));
  keep.hold(py::reinterpret_borrow<py::object>(obj));
  return tensor;
}

py::dtype numpyDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return py::dtype("float32");
    case DType::kFloat64: return py::dtype("float64");
    case DType::kFloat16: return py::dtype("float16");
    case DType::kBFloat16: return py::dtype("uint16");
    case DType::kInt32: return py::dtype("int32");
    case DType::kInt64: return py::dtype("int64");
    case DType::kUInt8: return py::dtype("uint8");
  }
  throw py::type_error("cerar: unknown dtype");
}

PyHandle::PyHandle(Handle handle, Keep keep, DType dtype)
    : handle_(std::move(handle)), keep_(std::move(keep)), dtype_(dtype) {}

PyHandle::~PyHandle() {
  if (keep_ && !handle_.poll()) parked().emplace_back(handle_, std::move(*keep_));
}

bool PyHandle::poll() const { return handle_.poll(); }

bool PyHandle::wait(std::optional<double> timeoutSeconds) {
  if (handle_.poll()) {  // most waits of a step: ended already, nothing to wait for
    handle_.wait();  // throws the operation's error, if any
    keep_.reset();
    return true;
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      timeoutSeconds ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(*timeoutSeconds))
                     : Clock::time_point::max();
  for (;;) {
    auto slice = std::chrono::milliseconds(100);
    if (timeoutSeconds) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      slice = std::max(std::chrono::milliseconds(0), std::min(slice, left));
    }
    bool done;
    {
      py::gil_scoped_release release;
      done = handle_.waitFor(slice);
      if (done) handle_.wait();  // throws the operation's error, if any
    }
    if (done) {
      keep_.reset();
      return true;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (timeoutSeconds && Clock::now() >= deadline) return false;
  }
}

py::array PyHandle::output() const {
  handle_.wait();
  const auto& bytes = handle_.output();
  const auto& shape = handle_.outputShape();
  py::array out(numpyDType(dtype_), std::vector<py::ssize_t>(shape.begin(), shape.end()));
  if (static_cast<size_t>(out.nbytes()) != bytes.size()) {
    throw py::value_error("cerar: the gathered output holds " + std::to_string(bytes.size()) +
                          " bytes, its shape says " + std::to_string(out.nbytes()));
  }
  if (!bytes.empty()) std::memcpy(out.mutable_data(), bytes.data(), bytes.size());
  return out;
}

std::vector<int64_t> PyHandle::receivedSplits() const {
  handle_.wait();
  return handle_.receivedSplits();
}

int PyHandle::processSetId() const {
  handle_.wait();
  return handle_.processSetId();
}

int PyHandle::lastJoinedRank() const {
  handle_.wait();
  return handle_.lastJoinedRank();
}

void pruneParked() {
  auto& list = parked();
  for (size_t i = 0; i < list.size();) {
    if (list[i].first.poll()) {
      list[i] = std::move(list.back());
      list.pop_back();
    } else {
      ++i;
    }
  }
}

}  // namespace cerar::bindings
