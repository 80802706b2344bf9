#!/usr/bin/env bash
# Installs everything cerar needs (idempotent) and builds it into build/.
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  cmake ninja-build g++ pkg-config
  libgloo-dev libboost-dev googletest libgtest-dev
  pybind11-dev python3-dev python3-venv python3-pip python3-numpy python3-pytest
  python3-torch python3-matplotlib python3-sklearn
  iproute2 procps openmpi-bin libopenmpi-dev
  openssh-server  # sshd of the emulated hosts in the multi-host tests (not started as a service)
  fortunes  # English text for the time-to-accuracy language model (bench/tta_model.py)
  clang libclang-rt-dev  # clang with libFuzzer, for scripts/fuzz.sh
)

missing=()
for package in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

[ "${1:-}" = "--no-build" ] && exit 0

BUILD_DIR=${CERAR_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR"

# ==== Python (owned by bindings/ and frameworks/) ==============================================
# A venv on Debian's /usr/bin/python3 that also sees apt's python3-torch and python3-numpy
# (--system-site-packages). pip adds only what Debian lacks (scikit-build-core, jax), pinned to
# Debian's numpy, which torch 1.13 was built against; then `pip install .` builds the extension
# cerar._cerar (bindings/) and installs the package (frameworks/cerar) and `cerarrun`.
# Skipped when nothing changed: a stamp holds a hash of the sources it was built from.
setup_python() {
  local venv=.venv
  local py=$venv/bin/python
  [ -x "$py" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  local constraints=$venv/cerar-constraints.txt
  /usr/bin/python3 -c 'import numpy; print("numpy==" + numpy.__version__)' >"$constraints"
  if ! "$py" -c 'import scikit_build_core, jax, pytest' 2>/dev/null; then
    echo "setup: pip-installing scikit-build-core and jax into $venv"
    # jax 0.5+ needs numpy >= 1.25; Debian 12 has 1.24.
    "$py" -m pip install -q -c "$constraints" "scikit-build-core>=0.10" "jax[cpu]<0.5" pytest
  fi
  # Ray, for cerar.ray and its tests (the optional extra cerar[ray]; docs/ray.md): about 45 s
  # and 260 MB on a fresh machine. CERAR_NO_RAY=1 leaves it out (its tests then skip).
  if [ "${CERAR_NO_RAY:-0}" != 1 ] && ! "$py" -c 'import ray' 2>/dev/null; then
    echo "setup: pip-installing ray into $venv"
    "$py" -m pip install -q -c "$constraints" "ray>=2.10,<3"
  fi
  local stamp=$venv/cerar-build.stamp hash
  hash=$(find pyproject.toml CMakeLists.txt cmake bindings frameworks core ops -type f \
      \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.py' -o -name '*.txt' \
      -o -name '*.cmake' -o -name '*.toml' \) -print0 | sort -z | xargs -0 sha256sum |
    sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ] || ! "$py" -c 'import cerar' 2>/dev/null; then
    echo "setup: pip install . (the cerar package into $venv)"
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
      "$py" -m pip install -q --no-build-isolation -c "$constraints" .
    echo "$hash" >"$stamp"
  fi
}
setup_python
# ==== end of the Python section ================================================================
