#include "bindings/stats.h"

#include <pybind11/stl.h>

#include <vector>

#include "core/control/message.h"
#include "ops/codec/wire.h"
#include "ops/communicator.h"

namespace py = pybind11;

namespace cerar::bindings {
namespace {

// {"allreduce": n, ...}: one entry per Kind.
py::dict byKind(const std::array<uint64_t, kKindCount>& counts) {
  py::dict d;
  for (size_t k = 0; k < kKindCount; ++k) d[kindName(static_cast<Kind>(k))] = counts[k];
  return d;
}

// {"ring": {"none": {"buffers": n, "bytes_sent": b}, ...}, ...}
using ByAlgorithm = std::array<std::array<uint64_t, kWireCount>, kAlgorithmCount>;
py::dict byAlgorithm(const ByAlgorithm& buffers, const ByAlgorithm& bytesSent) {
  py::dict d;
  for (size_t a = 0; a < kAlgorithmCount; ++a) {
    py::dict wires;
    for (size_t w = 0; w < kWireCount; ++w) {
      py::dict cell;
      cell["buffers"] = buffers[a][w];
      cell["bytes_sent"] = bytesSent[a][w];
      wires[wireName(static_cast<Wire>(w))] = cell;
    }
    d[algorithmName(static_cast<Algorithm>(a))] = wires;
  }
  return d;
}

// {"bounds": [...], "buckets": [...] (one more than bounds, not cumulative), "count", "sum"}
py::dict histogram(const WaitHistogram& h) {
  py::dict d;
  d["bounds"] = std::vector<double>(kWaitBounds.begin(), kWaitBounds.end());
  d["buckets"] = std::vector<uint64_t>(h.buckets.begin(), h.buckets.end());
  d["count"] = h.count;
  d["sum"] = h.sumSeconds;
  return d;
}

// {set id: {"units_by_kind", "tensors_by_kind", "allreduce_by_algorithm"}} (0: every rank).
py::dict bySet(const RuntimeStats& s) {
  py::dict d;
  for (const SetCounters& c : s.bySet) {
    py::dict set;
    set["units_by_kind"] = byKind(c.unitsByKind);
    set["tensors_by_kind"] = byKind(c.tensorsByKind);
    set["allreduce_by_algorithm"] = byAlgorithm(c.allreduceBuffers, c.allreduceBytesSent);
    d[py::int_(c.set)] = set;
  }
  return d;
}

// {"probed": bool, "alpha": seconds, "beta": seconds per byte}; the job's links also have
// "cpu_bound" (the probe's verdict) and "window_bytes" (the pacing window, 0: none).
py::dict linkFigures(const LinkFigures& f) {
  py::dict d;
  d["probed"] = f.probed;
  d["alpha"] = f.alpha;
  d["beta"] = f.beta;
  return d;
}

}  // namespace

void addLink(py::dict& d, const RuntimeStats& s) {
  py::dict link;
  py::dict job = linkFigures(s.link);
  job["cpu_bound"] = s.linkCpuBound;
  job["window_bytes"] = s.linkWindowBytes;
  link["job"] = job;
  if (s.hostStep) link["local"] = linkFigures(s.hostLink);
  d["link"] = link;
}

void addBreakdowns(py::dict& d, const RuntimeStats& s) {
  d["units_by_kind"] = byKind(s.unitsByKind);
  d["tensors_by_kind"] = byKind(s.tensorsByKind);
  d["allreduce_by_algorithm"] = byAlgorithm(s.allreduceBuffers, s.allreduceBytesSent);
  d["by_process_set"] = bySet(s);
  d["negotiation_wait"] = histogram(s.negotiationWait);
  d["transport_wait"] = histogram(s.transportWait);
  d["stall_warnings"] = s.stallWarnings;
}

}  // namespace cerar::bindings
