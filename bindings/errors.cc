// Python classes of cerar's errors: one per StatusCode, all under CerarError (a RuntimeError),
// so `except RuntimeError` still catches every one. Each instance carries `.code` (the code's
// name: "timeout", "peer_lost", "mismatch", "shut_down", "invalid_argument", "internal") and
// `.peer` (the rank the failure concerns, or None).
#include <pybind11/pybind11.h>

#include <algorithm>
#include <array>
#include <string>

#include "bindings/tensors.h"
#include "common/error.h"

namespace py = pybind11;

namespace cerar::bindings {
namespace {

constexpr size_t kCodes = size_t(StatusCode::kInternal) + 1;
// Owned for the life of the interpreter (module globals hold them too).
std::array<PyObject*, kCodes> classes{};

PyObject* makeClass(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("cerar._cerar.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.attr(name) = py::handle(cls);
  return cls;
}

}  // namespace

void registerErrors(py::module_& m) {
  PyObject* base = makeClass(m, "CerarError", PyExc_RuntimeError,
                             "A cerar operation failed; the base of cerar's error classes.");
  auto sub = [&](StatusCode code, const char* name, const char* doc) {
    classes[size_t(code)] = makeClass(m, name, base, doc);
  };
  sub(StatusCode::kTimeout, "CerarTimeoutError",
      "A peer stayed silent past CERAR_TIMEOUT_SECONDS (or a stall limit); .peer names it.");
  sub(StatusCode::kPeerLost, "PeerLostError", "A peer died or failed; .peer names it.");
  sub(StatusCode::kMismatch, "MismatchError", "Ranks submitted different things under one name.");
  sub(StatusCode::kShutDown, "ShutDownError", "The runtime was shut down.");
  sub(StatusCode::kInternal, "InternalError", "A failure no other class describes.");
  py::tuple invalidBases = py::make_tuple(py::handle(base), py::handle(PyExc_ValueError));
  classes[size_t(StatusCode::kInvalidArgument)] =
      makeClass(m, "InvalidArgumentError", invalidBases.ptr(),
                "Bad arguments or settings on this rank (also a ValueError).");
  classes[size_t(StatusCode::kOk)] = base;

  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const Error& e) {
      PyObject* cls = classes[std::min(size_t(e.code()), kCodes - 1)];
      py::object error = py::reinterpret_borrow<py::object>(cls)(e.what());
      std::string code = statusCodeName(e.code());
      std::replace(code.begin(), code.end(), ' ', '_');
      error.attr("code") = code;
      error.attr("peer") = e.peer() >= 0 ? py::object(py::int_(e.peer())) : py::none();
      PyErr_SetObject(cls, error.ptr());
    }
  });

  m.def(
      "_raise_status",
      [](int code, int peer, const std::string& message) {
        CERAR_CHECK_ARGUMENT(code > 0 && code < int(kCodes), "no status code ", code);
        Status(StatusCode(code), message, peer).raise();
      },
      py::arg("code"), py::arg("peer"), py::arg("message"),
      "Raises the error of status `code` (1..6, core order): for tests of the translation.");
}

}  // namespace cerar::bindings
