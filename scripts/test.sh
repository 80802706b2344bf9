#!/usr/bin/env bash
# Runs every test: installs and builds first (scripts/setup.sh test), then ctest (C++, pytest, bench).
# Usage: scripts/test.sh [--sanitize] [--envs] [--repeat N]
#   --sanitize  adds the C++ tests under ASan+UBSan and the runtime tests under TSan
#               (CMakePresets.json: presets asan and tsan), and runs each fuzz target for
#               CERAR_FUZZ_SECONDS (default 20) from its corpus (scripts/fuzz.sh).
#   --envs      also runs each pinned environment's script, scripts/<name>-env.sh (torch 2.x:
#               scripts/torch2-env.sh), each a stage: its own venv of exact versions
#               (scripts/envs/<name>.txt, built once per machine outside the clone), cerar built
#               for it once, its selection of the pytest modules and its smoke runs.
#   --repeat N  runs each test up to N times, stopping a test at its first failure (ctest's
#               --repeat until-fail:N; each pytest module is one ctest test, so it is rerun whole).
#               For hunting flaky tests, e.g. under load: docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=0 envs=0 repeat=()
while (($#)); do
  case "$1" in
    --sanitize) sanitize=1 ;;
    --envs) envs=1 ;;
    --repeat)
      [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "test.sh: --repeat needs a count >= 1" >&2; exit 2; }
      repeat=(--repeat "until-fail:$2"); shift ;;
    *) echo "usage: scripts/test.sh [--sanitize] [--envs] [--repeat N]" >&2; exit 2 ;;
  esac
  shift
done

# Each stage's wall time, for docs/testing.md's table of where CI's time goes.
t0=$SECONDS
took() { echo "test.sh: $1 took $((SECONDS - t0)) s"; t0=$SECONDS; }
scripts/setup.sh test
took "setup (installs, pip install ., the C++ tests' build)"
ctest --test-dir build --output-on-failure -j2 --timeout 600 "${repeat[@]}"
took "release tests (C++, pytest modules, bench scripts)"
if ((envs)); then
  for script in scripts/*-env.sh; do
    "$script"
    took "$(basename "$script" .sh) (environment, cerar's build, pytest modules, examples)"
  done
fi
if ((sanitize)); then
  for preset in asan tsan; do
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset"
    took "$preset build"
    ctest --preset "$preset" "${repeat[@]}"
    took "$preset tests"
  done
  scripts/fuzz.sh "${CERAR_FUZZ_SECONDS:-20}"
  took "fuzzing (build and run)"
fi
