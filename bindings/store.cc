// The rendezvous store in cerar._cerar: its server (cerarrun, cerar.ray's driver and the torch
// backend host it) and a client (cerarrun's elastic driver and its workers speak through it,
// frameworks/cerar/elastic/protocol.py).
#include <gloo/common/error.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings/store.h"
#include "rendezvous/tcp_store.h"
#include "common/error.h"

namespace py = pybind11;

namespace cerar::bindings {
namespace {

std::chrono::milliseconds millisecondsOf(double seconds) {
  CERAR_CHECK_ARGUMENT(seconds > 0, "store timeout must be > 0 seconds, got ", seconds);
  return std::chrono::milliseconds(int64_t(seconds * 1000));
}

// The client's calls without the GIL, and with the store's failures (gloo::IoException: the
// server unreachable, gone, or a wait past its limit) as cerar's class for a silent peer.
template <typename Call>
auto storeCall(const TcpStore& store, const std::string& key, Call&& call) {
  py::gil_scoped_release release;
  try {
    return call();
  } catch (const gloo::IoException& e) {
    throw TimeoutError(detail::concat("cerar: the store at ", store.address(), " (key '", key,
                                      "'): ", e.what()));
  }
}

py::bytes bytesOf(const std::vector<char>& value) { return {value.data(), value.size()}; }

std::vector<char> charsOf(const py::bytes& value) {
  const std::string text = value;
  return {text.begin(), text.end()};
}

void defineServer(py::module_& m) {
  py::class_<TcpStoreServer>(m, "StoreServer",
                             "The rendezvous store's server (binds on construction).")
      .def(py::init([](const std::string& host, uint16_t port, std::string secret,
                       std::string jobId) {
             return std::make_unique<TcpStoreServer>(host, port, std::move(secret),
                                                     StoreLimits::fromEnvironment(),
                                                     std::move(jobId));
           }),
           py::arg("host"), py::arg("port") = 0, py::arg("secret") = "", py::arg("job_id") = "")
      .def_property_readonly("port", &TcpStoreServer::port)
      .def("start", &TcpStoreServer::start)
      .def("try_get", [](const TcpStoreServer& s, const std::string& key) -> py::object {
        auto value = s.tryGet(key);
        if (!value) return py::none();
        return bytesOf(*value);
      });
}

void defineClient(py::module_& m) {
  using Client = std::shared_ptr<TcpStore>;
  py::class_<TcpStore, Client>(m, "StoreClient",
                               "A connection to a rendezvous store (rendezvous/tcp_store.h).")
      .def(py::init([](const std::string& host, uint16_t port, const std::string& secret,
                       double timeoutSeconds, const std::string& jobId) {
             const auto limit = millisecondsOf(timeoutSeconds);
             py::gil_scoped_release release;
             try {
               return std::make_shared<TcpStore>(host, port, secret, limit, jobId);
             } catch (const gloo::IoException& e) {
               throw TimeoutError(detail::concat("cerar: cannot reach the store at ", host, ":",
                                                 port, ": ", e.what()));
             }
           }),
           py::arg("host"), py::arg("port"), py::arg("secret") = "",
           py::arg("timeout_seconds") = 30.0, py::arg("job_id") = "")
      .def("set", [](TcpStore& s, const std::string& key, const py::bytes& value) {
             auto data = charsOf(value);
             storeCall(s, key, [&] { s.set(key, data); });
           }, py::arg("key"), py::arg("value"))
      .def("get", [](TcpStore& s, const std::string& key, std::optional<double> seconds) {
             auto value = storeCall(s, key, [&] {
               return seconds ? s.get(key, millisecondsOf(*seconds)) : s.get(key);
             });
             return bytesOf(value);
           }, py::arg("key"), py::arg("timeout_seconds") = py::none(),
           "Waits until `key` exists (at most the limit, default the constructor's).")
      .def("add", [](TcpStore& s, const std::string& key, int64_t delta) {
             return storeCall(s, key, [&] { return s.add(key, delta); });
           }, py::arg("key"), py::arg("delta"), "Adds to a counter; add(key, 0) reads it.")
      .def("check", [](TcpStore& s, const std::vector<std::string>& keys) {
             return storeCall(s, keys.empty() ? "" : keys.front(),
                              [&] { return s.check(keys); });
           }, py::arg("keys"), "True when every key exists; does not wait.")
      .def("close", [](TcpStore& s) {
             py::gil_scoped_release release;
             s.goodbye();
           })
      .def_property_readonly("address", &TcpStore::address);
}

}  // namespace

void registerStore(py::module_& m) {
  defineServer(m);
  defineClient(m);
}

}  // namespace cerar::bindings
