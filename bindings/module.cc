// cerar._cerar: the runtime (core/runtime.h) and the rendezvous server, as they are.
// The Python package frameworks/cerar builds the user API on top of this.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings/settings.h"
#include "bindings/stats.h"
#include "bindings/store.h"
#include "bindings/tensors.h"
#include "core/control/message.h"
#include "core/policy/fusion.h"
#include "core/runtime.h"
#ifdef CERAR_HAVE_CUDA
#include "core/device/cuda/cuda_device_ops.h"
#include "ops/transport/nccl_library.h"
#endif
#include "common/error.h"

namespace py = pybind11;
using namespace cerar;
using cerar::bindings::Keep;
using cerar::bindings::PyHandle;
using cerar::bindings::RawTensor;
using cerar::bindings::viewTensor;

namespace {

// Runtime::start with the CUDA device side where this build has it.
std::unique_ptr<Runtime> startRuntime(RuntimeConfig config) {
#ifdef CERAR_HAVE_CUDA
  if (!config.deviceOps) config.deviceOps = cudaDeviceOps();
#endif
  return Runtime::start(config);
}

// A name still in flight on this rank is refused at the call, as Horovod's ValueError, with
// the runtime's message (Runtime::inFlight, the one check: the runtime refuses it again at
// enqueue, so that of two threads racing with one name the later one's handle fails).
void refuseInFlight(const Runtime& rt, const std::vector<std::string>& names, int32_t set) {
  const Status busy = rt.inFlight(names, set);
  if (!busy.ok()) throw py::value_error(busy.message);
}

std::unique_ptr<PyHandle> makeHandle(Handle h, Keep keep, DType dtype) {
  return std::make_unique<PyHandle>(std::move(h), std::move(keep), dtype);
}

// One allreduce enqueued with the GIL released; `keep` holds what its tensors view.
std::unique_ptr<PyHandle> enqueueAllreduce(Runtime& rt, const std::string& name, Tensor in,
                                           Tensor out, Keep keep, Op op, double prescale,
                                           double postscale, Wire wire, int32_t set) {
  const DType dtype = in.dtype;
  Handle h;
  {
    py::gil_scoped_release release;
    h = rt.allreduce(name, std::move(in), std::move(out), op, prescale, postscale, {}, wire,
                     set);
  }
  return makeHandle(std::move(h), std::move(keep), dtype);
}

std::unique_ptr<PyHandle> allreduce(Runtime& rt, const std::string& name, py::handle input,
                                    py::object output, Op op, double prescale,
                                    double postscale, const std::string& wire, int32_t set) {
  refuseInFlight(rt, {name}, set);
  const Wire format = parseWire(wire);
  bindings::pruneParked();
  Keep keep;
  const bool inPlace = output.is_none();
  Tensor in = viewTensor(input, inPlace, keep);
  Tensor out = inPlace ? in : viewTensor(output, true, keep);
  return enqueueAllreduce(rt, name, std::move(in), std::move(out), std::move(keep), op,
                          prescale, postscale, format, set);
}

// The frameworks' common call: one host tensor given by address, in place, in set 0, on the
// job's wire; no RawTensor object per call (Python's work is most of a small tensor's cost).
std::unique_ptr<PyHandle> allreduceHost(Runtime& rt, const std::string& name, py::object owner,
                                        uintptr_t ptr, DType dtype, std::vector<int64_t> shape,
                                        Op op, double prescale, double postscale) {
  refuseInFlight(rt, {name}, 0);
  bindings::pruneParked();
  Keep keep;
  keep.hold(std::move(owner));
  Tensor in;
  in.data = reinterpret_cast<void*>(ptr);
  in.dtype = dtype;
  in.shape = std::move(shape);
  Tensor out = in;
  return enqueueAllreduce(rt, name, std::move(in), std::move(out), std::move(keep), op,
                          prescale, postscale, Wire::kNone, 0);
}

std::unique_ptr<PyHandle> groupedAllreduce(Runtime& rt, const std::vector<std::string>& names,
                                           const py::list& inputs, py::object outputs, Op op,
                                           double prescale, double postscale,
                                           const std::string& wire, int32_t set) {
  refuseInFlight(rt, names, set);
  const Wire format = parseWire(wire);
  bindings::pruneParked();
  Keep keep;
  const bool inPlace = outputs.is_none();
  std::vector<Tensor> ins, outs;
  for (auto item : inputs) ins.push_back(viewTensor(item, inPlace, keep));
  if (inPlace) {
    outs = ins;
  } else {
    for (auto item : py::list(outputs)) outs.push_back(viewTensor(item, true, keep));
  }
  const DType dtype = ins.empty() ? DType::kFloat32 : ins.front().dtype;
  Handle h;
  {
    py::gil_scoped_release release;
    h = rt.groupedAllreduce(names, std::move(ins), std::move(outs), op, prescale, postscale, {},
                            format, set);
  }
  return makeHandle(std::move(h), std::move(keep), dtype);
}

std::unique_ptr<PyHandle> reducescatter(Runtime& rt, const std::vector<std::string>& names,
                                        const py::list& inputs, const py::list& outputs, Op op,
                                        double prescale, double postscale, int32_t set) {
  refuseInFlight(rt, names, set);
  bindings::pruneParked();
  Keep keep;
  std::vector<Tensor> ins, outs;
  for (auto item : inputs) ins.push_back(viewTensor(item, false, keep));
  for (auto item : outputs) outs.push_back(viewTensor(item, true, keep));
  const DType dtype = ins.empty() ? DType::kFloat32 : ins.front().dtype;
  Handle h;
  {
    py::gil_scoped_release release;
    h = rt.reducescatter(names, std::move(ins), std::move(outs), op, prescale, postscale, {},
                         set);
  }
  return makeHandle(std::move(h), std::move(keep), dtype);
}

std::unique_ptr<PyHandle> alltoall(Runtime& rt, const std::string& name, py::handle input,
                                   std::vector<int64_t> splits, int32_t set) {
  refuseInFlight(rt, {name}, set);
  bindings::pruneParked();
  Keep keep;
  Tensor in = viewTensor(input, false, keep);
  Handle h;
  {
    py::gil_scoped_release release;
    h = rt.alltoall(name, in, std::move(splits), {}, set);
  }
  return makeHandle(std::move(h), std::move(keep), in.dtype);
}

std::unique_ptr<PyHandle> allgather(Runtime& rt, const std::string& name, py::handle input,
                                    int32_t set) {
  refuseInFlight(rt, {name}, set);
  bindings::pruneParked();
  Keep keep;
  Tensor in = viewTensor(input, false, keep);
  Handle h;
  {
    py::gil_scoped_release release;
    h = rt.allgather(name, in, {}, set);
  }
  return makeHandle(std::move(h), std::move(keep), in.dtype);
}

std::unique_ptr<PyHandle> groupedAllgather(Runtime& rt, const std::vector<std::string>& names,
                                           const py::list& inputs, int32_t set) {
  refuseInFlight(rt, names, set);
  bindings::pruneParked();
  Keep keep;
  std::vector<Tensor> ins;
  for (auto item : inputs) ins.push_back(viewTensor(item, false, keep));
  const DType dtype = ins.empty() ? DType::kFloat32 : ins.front().dtype;
  Handle h;
  {
    py::gil_scoped_release release;
    h = rt.groupedAllgather(names, std::move(ins), {}, set);
  }
  return makeHandle(std::move(h), std::move(keep), dtype);
}

std::unique_ptr<PyHandle> broadcast(Runtime& rt, const std::string& name, py::handle tensor,
                                    int root, int32_t set) {
  refuseInFlight(rt, {name}, set);
  bindings::pruneParked();
  Keep keep;
  Tensor t = viewTensor(tensor, true, keep);
  Handle h;
  {
    py::gil_scoped_release release;
    h = rt.broadcast(name, t, root, {}, set);
  }
  return makeHandle(std::move(h), std::move(keep), t.dtype);
}

template <typename F>
std::unique_ptr<PyHandle> simple(F&& f) {
  bindings::pruneParked();
  Handle h;
  {
    py::gil_scoped_release release;
    h = f();
  }
  return makeHandle(std::move(h), Keep{}, DType::kUInt8);
}

py::dict statsDict(const RuntimeStats& s) {
  py::dict d;
  d["cycles"] = s.cycles;
  d["shared_memory"] = s.sharedMemory;
  d["cache_hits"] = s.cacheHits;
  d["cache_misses"] = s.cacheMisses;
  d["fused_buffers"] = s.fusedBuffers;
  d["tensors_reduced"] = s.tensorsReduced;
  d["bytes_sent"] = s.bytesSent;
  d["bytes_received"] = s.bytesReceived;
  d["ring_buffers"] = s.ringBuffers;
  d["cerar_buffers"] = s.cerarBuffers;
  d["wire_buffers"] = s.wireBuffers;
  d["wire_fallbacks"] = s.wireFallbacks;
  d["budget_buffers"] = s.budgetBuffers;
  d["last_choice"] = s.lastChoice;
  d["non_finite_fallbacks"] = s.nonFiniteFallbacks;
  d["hierarchical_buffers"] = s.hierarchicalBuffers;
  d["last_components"] = s.lastComponents;
  d["allgather_buffers"] = s.allgatherBuffers;
  d["reducescatter_buffers"] = s.reducescatterBuffers;
  d["tensors_scattered"] = s.tensorsScattered;
  d["predicted_error_max"] = s.predictedErrorMax;
  d["predicted_error_last"] = s.predictedErrorLast;
  d["measured_error_last"] = s.measuredErrorLast;
  d["measured_error_max"] = s.measuredErrorMax;
  d["measured_error_sum"] = s.measuredErrorSum;
  d["measured_buffers"] = s.measuredBuffers;
  d["control_messages_sent"] = s.controlMessagesSent;
  d["control_messages_received"] = s.controlMessagesReceived;
  d["control_bytes_sent"] = s.controlBytesSent;
  d["control_bytes_received"] = s.controlBytesReceived;
  d["rendezvous_requests"] = s.rendezvousRequests;
  d["rendezvous_bytes_sent"] = s.rendezvousBytesSent;
  d["rendezvous_bytes_received"] = s.rendezvousBytesReceived;
  d["data_links"] = s.dataLinks;
  d["fusion_threshold_bytes"] = s.fusionThresholdBytes;
  d["cycle_time_ms"] = s.cycleTimeMs;
  d["components_scale"] = s.componentsScale;
  d["autotuning"] = s.autotuning;
  d["autotune_frozen"] = s.autotuneFrozen;
  bindings::addBreakdowns(d, s);
  bindings::addLink(d, s);
  return d;
}

}  // namespace

PYBIND11_MODULE(_cerar, m) {
  m.doc() = "cerar's C++ runtime (core/runtime.h); use the `cerar` package instead.";
  cerar::bindings::registerErrors(m);

  py::enum_<Op>(m, "Op")
      .value("Sum", Op::kSum)
      .value("Average", Op::kAverage)
      .value("Min", Op::kMin)
      .value("Max", Op::kMax)
      .value("Adasum", Op::kAdasum);
#ifdef CERAR_HAVE_CUDA
  m.attr("cuda_built") = true;
  // NCCL is loaded at first use, from these folders first (the package passes the nvidia-nccl
  // wheels' own), then the loader's path and the system's CUDA.
  m.def("set_nccl_search_folders", &setNcclSearchFolders, py::arg("folders"));
  m.def("nccl_version", [] {
          std::string why;
          const NcclLibrary* lib = tryNcclLibrary(&why);
          return py::make_tuple(lib ? lib->version : 0, lib ? lib->path : why);
        }, "(version code, path) of the NCCL loaded for CUDA tensors; (0, why) if none loads.");
#else
  m.attr("cuda_built") = false;
  m.def("set_nccl_search_folders", [](const std::vector<std::string>&) {}, py::arg("folders"));
  m.def("nccl_version", [] { return py::make_tuple(0, "built without the CUDA parts"); });
#endif
  m.def("wire_carries", [](const std::string& wire, DType dtype, Op op) {
          return wireMayCarry(parseWire(wire), dtype, op);
        }, py::arg("wire"), py::arg("dtype"), py::arg("op"),
        "Whether a lossy wire ('fp16', 'bf16', 'int8') may carry an all-reduce of dtype with op "
        "(the runtime's one rule; the tensors must also be in host memory).");
  m.def("parse_dtype", &parseDType, "DType from a name: f32, float32, bf16, ...");
  m.def("scatter_rows", &scatterRows, py::arg("rows"), py::arg("rank"), py::arg("size"),
        "A reducescatter's rows for `rank`: rows // size, the first rows % size ranks one more.");
  py::enum_<DType>(m, "DType")
      .value("float32", DType::kFloat32)
      .value("float64", DType::kFloat64)
      .value("float16", DType::kFloat16)
      .value("bfloat16", DType::kBFloat16)
      .value("int32", DType::kInt32)
      .value("int64", DType::kInt64)
      .value("uint8", DType::kUInt8);

  py::class_<RawTensor>(m, "RawTensor",
                        "A tensor by address; holds `owner` alive while operations use it.")
      .def(py::init([](py::object owner, uintptr_t ptr, DType dtype, std::vector<int64_t> shape,
                       int device, uintptr_t stream) {
             return RawTensor{std::move(owner), ptr, dtype, std::move(shape), device, stream};
           }),
           py::arg("owner"), py::arg("ptr"), py::arg("dtype"), py::arg("shape"),
           py::arg("device") = -1, py::arg("stream") = 0,
           "CUDA tensors: `stream` (a cudaStream_t as an integer, 0 = the default stream) is "
           "where the tensor's producers run; the runtime orders its work after them.")
      .def_readonly("ptr", &RawTensor::ptr)
      .def_readonly("shape", &RawTensor::shape)
      .def_readonly("device", &RawTensor::device);

  cerar::bindings::registerSettings(m);

  py::class_<PyHandle>(m, "Handle")
      .def("poll", &PyHandle::poll, "True once the operation has ended.")
      .def("wait", &PyHandle::wait, py::arg("timeout") = py::none(),
           "Waits (GIL released); raises the CerarError subclass of the failure; with a timeout, "
           "returns False if it is still running.")
      .def("output", &PyHandle::output, "allgather, alltoall: the gathered array (after wait).")
      .def("received_splits", &PyHandle::receivedSplits,
           "alltoall: the rows received from each rank; grouped allgather: the rows of every "
           "rank and tensor (after wait).")
      .def("last_joined_rank", &PyHandle::lastJoinedRank, "join: the rank that joined last.")
      .def("process_set_id", &PyHandle::processSetId, "add_process_set: the new set's id.");

  py::class_<Runtime, std::unique_ptr<Runtime>>(m, "Runtime")
      .def_static("start", &startRuntime, py::arg("config"),
                  py::call_guard<py::gil_scoped_release>(),
                  "Connects to the other ranks and starts the coordinator thread.")
      .def("shutdown", &Runtime::shutdown, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("rank", &Runtime::rank)
      .def_property_readonly("size", &Runtime::size)
      .def_property_readonly("local_rank", &Runtime::localRank)
      .def_property_readonly("local_size", &Runtime::localSize)
      .def_property_readonly("cross_rank", &Runtime::crossRank)
      .def_property_readonly("cross_size", &Runtime::crossSize)
      .def_property_readonly("is_homogeneous", &Runtime::isHomogeneous)
      .def("allreduce", &allreduce, py::arg("name"), py::arg("input"),
           py::arg("output") = py::none(), py::arg("op") = Op::kSum, py::arg("prescale") = 1.0,
           py::arg("postscale") = 1.0, py::arg("wire") = "none", py::arg("process_set") = 0,
           "In place when output is None. wire: none | fp16 | bf16 | int8 (docs/wires.md).")
      .def("allreduce_host", &allreduceHost, py::arg("name"), py::arg("owner"), py::arg("ptr"),
           py::arg("dtype"), py::arg("shape"), py::arg("op"), py::arg("prescale"),
           py::arg("postscale"),
           "allreduce(name, RawTensor(owner, ptr, dtype, shape)) in place, in set 0, on the "
           "job's wire: the common call without a RawTensor.")
      .def("grouped_allreduce", &groupedAllreduce, py::arg("names"), py::arg("inputs"),
           py::arg("outputs") = py::none(), py::arg("op") = Op::kSum,
           py::arg("prescale") = 1.0, py::arg("postscale") = 1.0, py::arg("wire") = "none",
           py::arg("process_set") = 0)
      .def("reducescatter", &reducescatter, py::arg("names"), py::arg("inputs"),
           py::arg("outputs"), py::arg("op") = Op::kSum, py::arg("prescale") = 1.0,
           py::arg("postscale") = 1.0, py::arg("process_set") = 0,
           "Each output gets this rank's share of the first dimension (scatter_rows).")
      .def("alltoall", &alltoall, py::arg("name"), py::arg("input"),
           py::arg("splits") = std::vector<int64_t>{}, py::arg("process_set") = 0,
           "Rows splits[j] to rank j; empty splits divide the first dimension equally.")
      .def("allgather", &allgather, py::arg("name"), py::arg("input"),
           py::arg("process_set") = 0)
      .def("grouped_allgather", &groupedAllgather, py::arg("names"), py::arg("inputs"),
           py::arg("process_set") = 0,
           "One unit; output() is flat (tensor 0 gathered, then tensor 1, ...), "
           "received_splits() the rows at [rank * tensors + tensor].")
      .def("broadcast", &broadcast, py::arg("name"), py::arg("tensor"), py::arg("root"),
           py::arg("process_set") = 0, "root: a global rank, also in a process set.")
      .def("barrier", [](Runtime& rt, int32_t set) {
             return simple([&] { return rt.barrier({}, set); });
           }, py::arg("process_set") = 0)
      .def("add_process_set", [](Runtime& rt, std::vector<int> ranks) {
             return simple([&] { return rt.addProcessSet(std::move(ranks)); });
           }, py::arg("ranks"), "Every rank together; the handle's process_set_id() is the id.")
      .def("remove_process_set", [](Runtime& rt, int32_t id) {
             return simple([&] { return rt.removeProcessSet(id); });
           }, py::arg("id"))
      .def("process_set_membership", &Runtime::processSetMembership, py::arg("id"),
           "(this rank's index in set id, the set's size); InvalidArgumentError when there is "
           "no such set or this rank is not in it")
      .def("process_set_ranks", &Runtime::processSetRanks, py::arg("id"),
           "The global ranks of set `id`, or None when there is none.")
      .def("process_set_ids", &Runtime::processSetIds)
      .def_property_readonly("dynamic_process_sets", &Runtime::dynamicProcessSets)
      .def("check_not_in_flight", &refuseInFlight, py::arg("names"), py::arg("process_set") = 0,
           "Raises ValueError while an operation of one of `names` is in flight in the set on "
           "this rank (every enqueue above checks its own names so)")
      .def("join", [](Runtime& rt) { return simple([&] { return rt.join(); }); })
      .def("start_timeline", &Runtime::startTimeline, py::arg("path"),
           py::arg("mark_cycles") = false, py::call_guard<py::gil_scoped_release>())
      .def("stop_timeline", &Runtime::stopTimeline, py::call_guard<py::gil_scoped_release>())
      .def("stats", [](const Runtime& rt) { return statsDict(rt.stats()); });

  cerar::bindings::registerStore(m);
}
