#!/usr/bin/env bash
# Installs what cerar needs (idempotent) and builds it, once, into build/.
# Usage: scripts/setup.sh [main|test] [--no-build]
#   main  (default) what the main job needs: Debian's compiler, Gloo, Boost.Asio, pybind11,
#         torch 1.13, numpy and scikit-learn; the venv .venv with prometheus-client; `pip install
#         .` (the library and the extension cerar._cerar, built in build/).
#   test  also every test's and benchmark's dependencies (below, each with its reason), and the
#         C++ tests and programs, built in the same folder from the same library objects.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=main build=1
for arg in "$@"; do
  case "$arg" in
    main | test) mode=$arg ;;
    --no-build) build=0 ;;
    *) echo "usage: scripts/setup.sh [main|test] [--no-build]" >&2; exit 2 ;;
  esac
done

# The main job: the extension's build and examples/torch_train.py.
APT_MAIN=(
  cmake ninja-build g++ pkg-config
  libgloo-dev libboost-dev pybind11-dev python3-dev python3-venv python3-pip
  libssl-dev  # libcrypto: HMAC-SHA-256 of the data links' start-up proofs
  python3-numpy python3-torch python3-sklearn
)
# Tests and benchmarks only.
APT_TEST=(
  googletest libgtest-dev python3-pytest  # the C++ and Python test suites
  iproute2 procps  # network namespaces of bench/ and of the emulated hosts in the tests
  openmpi-bin libopenmpi-dev  # init() under Open MPI (test_environments.py); bench/'s MPI contender
  openssh-server  # sshd of the emulated hosts in the multi-host tests (not started as a service)
  python3-matplotlib  # bench/ plots
  fortunes  # English text for the time-to-accuracy language model (bench/tta_model.py)
  clang libclang-rt-dev  # clang with libFuzzer, for scripts/fuzz.sh
  prometheus  # the server that scrapes a job in tests/python/test_metrics.py
)
packages=("${APT_MAIN[@]}")
[ "$mode" = test ] && packages+=("${APT_TEST[@]}")

missing=()
for package in "${packages[@]}"; do
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

((build)) || exit 0

# ==== Python (owned by bindings/ and frameworks/) ==============================================
# A venv on Debian's /usr/bin/python3 that also sees apt's python3-torch and python3-numpy
# (--system-site-packages). pip adds only what Debian lacks (scikit-build-core; for the tests
# jax and Ray), pinned to Debian's numpy, which torch 1.13 was built against.
VENV=.venv
PY=$VENV/bin/python
[ -x "$PY" ] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
constraints=$VENV/cerar-constraints.txt
/usr/bin/python3 -c 'import numpy; print("numpy==" + numpy.__version__)' >"$constraints"
pip_install() { "$PY" -m pip install -q --disable-pip-version-check -c "$constraints" "$@"; }
if ! "$PY" -c 'import scikit_build_core' 2>/dev/null; then
  echo "setup: pip-installing scikit-build-core into $VENV"
  pip_install "scikit-build-core>=0.10"
fi
# CERAR_METRICS_PORT's exporter (the optional extra cerar[metrics]; docs/metrics.md): pure
# Python and small, so the main job has it too.
if ! "$PY" -c 'import prometheus_client' 2>/dev/null; then
  echo "setup: pip-installing prometheus-client into $VENV (cerar[metrics])"
  pip_install "prometheus-client>=0.12"
fi
if [ "$mode" = test ]; then
  if ! "$PY" -c 'import jax, pytest' 2>/dev/null; then
    echo "setup: pip-installing jax and pytest into $VENV (tests/python/test_jax.py)"
    # jax 0.5+ needs numpy >= 1.25; Debian 12 has 1.24.
    pip_install "jax[cpu]<0.5" pytest
  fi
  # Ray, for cerar.ray and its tests (the optional extra cerar[ray]; docs/ray.md): about 45 s
  # and 260 MB on a fresh machine. CERAR_NO_RAY=1 leaves it out (its tests then skip).
  if [ "${CERAR_NO_RAY:-0}" != 1 ] && ! "$PY" -c 'import ray' 2>/dev/null; then
    echo "setup: pip-installing ray into $VENV (tests/python/test_ray.py)"
    pip_install "ray>=2.10,<3"
  fi
fi

# `pip install .` builds the library and the extension in build/ (one CMake folder for both
# modes); the tests' mode turns the C++ tests on in the same folder, and `cmake --build` then
# compiles only what the extension did not need. Skipped when nothing changed: a stamp holds a
# hash of the sources and whether the tests were configured (a test build serves the main job).
BUILD_DIR=build
tests=OFF
[ "$mode" = test ] && tests=ON
stamp=$VENV/cerar-build.stamp
hash=$(find pyproject.toml CMakeLists.txt cmake bindings frameworks common rendezvous core ops -type f \
    \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.py' \
    -o -name '*.txt' -o -name '*.cmake' -o -name '*.toml' \) -print0 | sort -z |
  xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
built=$(cat "$stamp" 2>/dev/null || true)
if [ "$built" != "$hash tests=$tests" ] && [ "$built" != "$hash tests=ON" ] ||
    ! "$PY" -c 'import cerar' 2>/dev/null; then
  echo "setup: pip install . (the cerar package into $VENV, built in $BUILD_DIR/)"
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    pip_install --no-build-isolation --config-settings=build-dir="$BUILD_DIR" \
    --config-settings=cmake.define.CERAR_BUILD_TESTS="$tests" .
  echo "$hash tests=$tests" >"$stamp"
fi
if [ "$mode" = test ]; then
  # The C++ tests and programs, against the library objects the extension's build made.
  cmake --build "$BUILD_DIR"
fi
