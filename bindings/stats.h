// The runtime's counters by kind, algorithm and wire, and the wait histogram, as Python dicts
// (cerar.stats(); read by cerar's metrics exporter, frameworks/cerar/_metrics.py).
#pragma once

#include <pybind11/pybind11.h>

#include "core/runtime_stats.h"

namespace cerar::bindings {

// Adds "units_by_kind", "tensors_by_kind", "allreduce_by_algorithm" and "negotiation_wait".
void addBreakdowns(pybind11::dict& d, const RuntimeStats& s);

// Adds "link": {"job": figures, "local": figures (a layered job only)}, each {"probed",
// "alpha" (s), "beta" (s/byte)}: the cost model's link figures (core/policy/link_probe.h).
void addLink(pybind11::dict& d, const RuntimeStats& s);

}  // namespace cerar::bindings
