#include "bindings/settings.h"

#include <pybind11/stl.h>

#include "core/config/settings.h"

namespace py = pybind11;

namespace cerar::bindings {
namespace {

py::list names(const std::vector<const char*>& list) {
  py::list out;
  for (const char* name : list) out.append(name);
  return out;
}

// One row as cerarrun and the tests read it; `default` is RuntimeConfig's own value.
py::dict rowDict(const Setting& s) {
  static const RuntimeConfig defaults;
  py::dict row;
  row["attribute"] = s.attribute;
  row["variable"] = s.variable;
  row["aliases"] = names(s.aliases);
  row["kind"] = s.kind == SettingKind::kJob ? "job" : "rank";
  row["type"] = settingType(s);
  row["low"] = s.low;
  row["high"] = s.high;
  row["choices"] = names(s.choices);
  std::visit([&](auto member) { row["default"] = defaults.*member; }, s.field);
  row["why"] = s.why;
  py::object flag = py::none();
  if (*s.flag.name != '\0') {
    py::dict f;
    f["name"] = s.flag.name;
    f["help"] = s.flag.help;
    f["metavar"] = *s.flag.metavar != '\0' ? py::object(py::str(s.flag.metavar)) : py::none();
    f["scale"] = s.flag.scale;
    flag = f;
  }
  row["flag"] = flag;
  return row;
}

}  // namespace

void registerSettings(py::module_& m) {
  py::class_<RuntimeConfig> config(m, "RuntimeConfig");
  config.def(py::init<>()).def_static("from_environment", &RuntimeConfig::fromEnvironment);
  for (const Setting& s : settings()) {
    std::visit([&](auto member) { config.def_readwrite(s.attribute, member); }, s.field);
  }
  m.def(
      "settings",
      [] {
        py::list rows;
        for (const Setting& s : settings()) rows.append(rowDict(s));
        return rows;
      },
      "The settings table (core/config/settings.h): one dict per setting, job-wide ones first.");
}

}  // namespace cerar::bindings
