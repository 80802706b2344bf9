// RuntimeConfig and the settings table in cerar._cerar (bindings/settings.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace cerar::bindings {

// Defines RuntimeConfig (one attribute per row of core/config/settings.h) and settings().
void registerSettings(pybind11::module_& m);

}  // namespace cerar::bindings
