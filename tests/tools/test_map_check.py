#!/usr/bin/env python3
"""Every unit's tests are findable by name: a C++ unit (core/, ops/, bindings/: a .cc file) has
tests/cpp/<unit>_test.cc, a Python module of frameworks/cerar has tests/python/test_<module>.py
(in a subpackage also test_<package>_<module>.py),
or docs/testing.md's map ("Where each unit is tested") has a row for it naming files that exist;
and a file named for a unit must reach it (exercises()).
Usage: test_map_check.py REPOSITORY"""
import re
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
doc = (root / "docs/testing.md").read_text()
section = doc.split("## Where each unit is tested", 1)
if len(section) < 2:
    sys.exit("docs/testing.md has no section 'Where each unit is tested'")
rows = {}
for line in section[1].split("\n## ", 1)[0].splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) >= 2 and cells[0].startswith("`"):
        rows[cells[0].strip("`")] = re.findall(r"`([^`]+)`", cells[1])

units = []
for folder in ("common", "rendezvous", "core", "ops", "bindings"):
    for source in sorted((root / folder).rglob("*.cc")):
        stem = source.stem
        units.append((str(source.relative_to(root)), [f"tests/cpp/{stem}_test.cc",
                                                      f"tests/gpu/{stem}_test.cc"]))
for module in sorted((root / "frameworks/cerar").rglob("*.py")):
    stem = module.parent.name if module.stem == "__init__" else module.stem.lstrip("_")
    named = [f"tests/python/test_{stem}.py"]
    if module.parent.name != "cerar" and module.stem != "__init__":  # cerar/elastic/protocol.py
        named.append(f"tests/python/test_{module.parent.name}_{stem}.py")
    units.append((str(module.relative_to(root)), named))



def reach(test):
    """The test file's text with what it pulls in by name: the test headers it includes
    ("runtime_scenarios.h", "tests/gpu/run_plans.h") and the worker scripts it runs."""
    text = test.read_text(errors="replace")
    parts = [text]
    for name in re.findall(r'#include "([^"]+\.h)"', text):
        for candidate in (test.parent / name, root / name):
            if candidate.is_file() and "tests" in candidate.parts:
                parts.append(candidate.read_text(errors="replace"))
                break
    for name in re.findall(r"\b(\w+\.py)\b", text):
        worker = test.parent / "workers" / name
        if worker.is_file():
            parts.append(worker.read_text(errors="replace"))
    return "\n".join(parts)


def exercises(test, unit):
    """Whether the test file reaches the unit: it names it (a C++ unit's stem, a header of its
    folder; a module's dotted name, stem or package), or, for a part of core/, drives the
    runtime whole (core/runtime.h); a binding is reached through the module cerar._cerar."""
    text = reach(test)
    path = Path(unit)
    if unit.startswith("bindings/"):
        return "cerar" in text
    if unit.endswith(".py"):
        dotted = ".".join(path.with_suffix("").parts[1:])
        names = [dotted.removesuffix(".__init__"), dotted.rsplit(".", 1)[0],
                 path.stem.lstrip("_") if path.stem != "__init__" else path.parent.name]
        return any(re.search(r"\b" + re.escape(n) + r"\b", text) for n in names)
    return (re.search(r"\b" + re.escape(path.stem) + r"\b", text) is not None
            or f'#include "{path.parent}/' in text
            or (unit.startswith("core/") and '#include "core/runtime.h"' in text))


missing, broken, idle = [], [], []
for unit, named in units:
    own = [path for path in named if (root / path).exists()]
    if own:
        if not any(exercises(root / path, unit) for path in own):
            idle.append(f"{unit}: {own[0]}")
        continue
    if unit not in rows:
        missing.append(unit)
        continue
    for path in rows[unit]:
        if not (root / path.split("::")[0]).exists():
            broken.append(f"{unit}: {path}")
    if not any(exercises(root / p.split("::")[0], unit) for p in rows[unit]
               if (root / p.split("::")[0]).exists()):
        idle.append(f"{unit}: {', '.join(rows[unit])}")
stale = [unit for unit in rows if not (root / unit).exists()]
for entry in idle:
    print(f"the test file named for a unit does not reach it (name, include, import): {entry}")
for unit in missing:
    print(f"no test file named after {unit} and no row in docs/testing.md's map")
for entry in broken:
    print(f"docs/testing.md's map names a file that does not exist: {entry}")
for unit in stale:
    print(f"docs/testing.md's map has a row for {unit}, which does not exist")
if missing or broken or stale or idle:
    sys.exit(1)
print(f"{len(units)} units: each has a test file of its name or a row in the map")
