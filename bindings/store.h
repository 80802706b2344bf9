// The rendezvous store's server and client in cerar._cerar (bindings/store.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace cerar::bindings {

// Defines StoreServer and StoreClient.
void registerStore(pybind11::module_& m);

}  // namespace cerar::bindings
