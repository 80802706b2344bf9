#!/usr/bin/env bash
# Runs every test: installs and builds first (scripts/setup.sh), then ctest (C++, pytest, bench).
# Usage: scripts/test.sh [--sanitize]
#   --sanitize adds the C++ tests under ASan+UBSan and the runtime tests under TSan
#   (CMakePresets.json: presets asan and tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j2 --timeout 600
if [ "${1:-}" = "--sanitize" ]; then
  for preset in asan tsan; do
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset"
    ctest --preset "$preset"
  done
fi
