#!/usr/bin/env python3
"""Every unit's tests are findable by name: a C++ unit (core/, ops/, bindings/: a .cc file) has
tests/cpp/<unit>_test.cc, a Python module of frameworks/cerar has tests/python/test_<module>.py
(in a subpackage also test_<package>_<module>.py),
or docs/testing.md's map ("Where each unit is tested") has a row for it naming files that exist.
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

missing, broken = [], []
for unit, named in units:
    if any((root / path).exists() for path in named):
        continue
    if unit not in rows:
        missing.append(unit)
        continue
    for path in rows[unit]:
        if not (root / path.split("::")[0]).exists():
            broken.append(f"{unit}: {path}")
stale = [unit for unit in rows if not (root / unit).exists()]
for unit in missing:
    print(f"no test file named after {unit} and no row in docs/testing.md's map")
for entry in broken:
    print(f"docs/testing.md's map names a file that does not exist: {entry}")
for unit in stale:
    print(f"docs/testing.md's map has a row for {unit}, which does not exist")
if missing or broken or stale:
    sys.exit(1)
print(f"{len(units)} units: each has a test file of its name or a row in the map")
