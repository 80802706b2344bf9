#!/usr/bin/env bash
# Runs every test: installs and builds first (scripts/setup.sh), then ctest.
# Usage: scripts/test.sh [--sanitize]   (--sanitize adds an ASan+UBSan build of the C++ tests)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j2 --timeout 600
if [ "${1:-}" = "--sanitize" ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCERAR_SANITIZE=address,undefined -DCERAR_WITH_CUDA=OFF >/dev/null
  cmake --build build-asan --target cerar_tests
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest --test-dir build-asan \
    --output-on-failure -j2 --timeout 900
fi
