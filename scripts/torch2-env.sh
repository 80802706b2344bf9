#!/usr/bin/env bash
# cerar on a current torch 2.x from PyPI: makes a second venv .venv-torch2, installs cerar into
# it, runs the whole Python suite and the examples' smoke runs there with deprecation warnings
# as errors, and ends with one summary line naming the torch version and counting the tests of
# the integrations (FSDP, torchrun, Lightning, Ray Train) that only this environment runs.
#
# CI does not run this (scripts/test.sh and .ci/run stay on Debian's torch 1.13 in .venv and
# download no torch). Run it by hand after changing frameworks/cerar/torch/.
#
# Disk: .venv-torch2 takes about 6 GiB (measured with torch 2.15.0), 5.2 GiB of it the CUDA
# build of torch (`pip install torch` brings triton and the nvidia-* CUDA libraries although
# only the CPU is used here); pip keeps no cache of it (--no-cache-dir). The first run
# downloads about 3 GiB (a few minutes) and builds the extension (a few minutes on 2 cores);
# later runs skip both when nothing changed (the pip installs when the packages import, the
# build by a stamp).
#
# Usage: scripts/torch2-env.sh [pytest arguments; default: -q tests/python]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=.venv-torch2
PY=$VENV/bin/python

# --- the environment -------------------------------------------------------------------------
# Without --system-site-packages: Debian's torch 1.13, numpy 1.24 and scikit-learn stay out of
# sight, so no import can fall back to Debian's torch, and every compiled package (torch, jax,
# scikit-learn) comes from PyPI built against the same numpy 2.x (Debian's were built against
# numpy 1.x and would break when the current torch pulls numpy 2.x into the same path).
[ -x "$PY" ] || /usr/bin/python3 -m venv "$VENV"
if ! "$PY" -c 'import torch, numpy, pytest, scikit_build_core, pybind11, sklearn, jax,
lightning, ray.train.torch' 2>/dev/null
then
  echo "torch2-env: pip-installing torch (CUDA build, used on the CPU), numpy, jax[cpu]," \
    "scikit-learn, lightning, ray[train], pytest, scikit-build-core and pybind11 into $VENV" \
    "(about 3.5 GiB)"
  # scikit-learn: examples/torch_train.py and fidelity_train.py; jax: tests/python/test_jax.py;
  # lightning and ray[train]: test_lightning.py and test_ray_train.py.
  "$PY" -m pip install -q --no-cache-dir torch numpy "jax[cpu]" scikit-learn lightning \
    "ray[train]" pytest "scikit-build-core>=0.10" "pybind11>=2.10"
fi
TORCH=$("$PY" -c 'import torch; print(torch.__version__)')
case $TORCH in
  1.*) echo "torch2-env: $VENV has torch $TORCH, not 2.x"; exit 1 ;;
esac

# --- cerar, built for this interpreter --------------------------------------------------------
# As scripts/setup.sh's pip install (no build isolation: the build uses the venv's scikit-build-core
# and pybind11), but in a build folder of its own inside the venv: build/ is .venv's, configured
# for another interpreter. The stamp hashes the sources and the torch version.
stamp=$VENV/cerar-build.stamp
hash=$( (echo "$TORCH"
  find pyproject.toml CMakeLists.txt cmake bindings frameworks core ops -type f \
    \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.py' \
    -o -name '*.txt' -o -name '*.cmake' -o -name '*.toml' \) -print0 | sort -z |
    xargs -0 sha256sum) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ] || ! "$PY" -c 'import cerar' 2>/dev/null; then
  echo "torch2-env: pip install . (the cerar package into $VENV)"
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$PY" -m pip install -q --no-build-isolation \
    --config-settings=build-dir="$ROOT/$VENV/cerar-build" .
  echo "$hash" >"$stamp"
fi

# --- strict warnings ---------------------------------------------------------------------------
# Deprecations are errors: DeprecationWarning, PendingDeprecationWarning, FutureWarning, and the
# UserWarnings by which torch announces deprecated APIs (their text says "deprecated"), wherever
# cerar, the tests or the examples call torch, numpy or jax. The last lines exempt warnings
# that third-party packages raise inside their own modules (named explicitly, as a regular
# expression matched at the start of the warning's module) when merely imported or used by
# torch, the examples' data loading, jax, Lightning or Ray Train: not cerar's to fix, so they are
# shown once and do not fail the run (lightning 2.6.6 warns that its own _pytree.py uses a
# deprecated torch API). cerar's code and the tests still may not warn. pytest gets the list
# through -o filterwarnings; every process the tests start (workers, cerarrun's ranks, examples,
# torchrun's, Lightning's and Ray's workers) gets it through sitecustomize.
filters=(
  "error::DeprecationWarning"
  "error::PendingDeprecationWarning"
  "error::FutureWarning"
  "error:.*deprecat:UserWarning"
  "default::Warning:(sklearn|scipy|sympy|networkx|triton|jaxlib|ml_dtypes|opt_einsum)(\\.|$)"
  "default::Warning:(lightning|lightning_fabric|lightning_utilities|pytorch_lightning)(\\.|$)"
  "default::Warning:(torchmetrics|ray|pyarrow|pandas|pydantic|fsspec|tensorboardX)(\\.|$)"
)
CERAR_WARNING_FILTERS=$(printf '%s\n' "${filters[@]}")
export CERAR_WARNING_FILTERS
export PYTHONPATH=$ROOT/scripts/torch2-warnings${PYTHONPATH:+:$PYTHONPATH}

# --- the suite and the examples -----------------------------------------------------------------
failed=()
pytest_args=("$@")
((${#pytest_args[@]})) || pytest_args=(-q tests/python)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
junit=$(mktemp)
trap 'rm -f "$log" "$junit"' EXIT
echo "torch2-env: python -m pytest ${pytest_args[*]} (torch $TORCH)"
if ! "$PY" -m pytest -p no:cacheprovider -o filterwarnings="$CERAR_WARNING_FILTERS" \
    --junitxml="$junit" "${pytest_args[@]}" 2>&1 | tee "$log"; then
  failed+=(pytest)
fi
summary=$(grep -E '(passed|failed|error|skipped)' "$log" | tail -n 1 | tr -d '=' | xargs)
# The integrations' tests, counted from pytest's report (a skip there is a missing package)
integrations=$("$PY" - "$junit" <<'EOF2'
import sys
import xml.etree.ElementTree as ET
files = ("test_fsdp", "test_torchrun", "test_lightning", "test_ray_train")
counts = dict.fromkeys(("passed", "failed", "skipped"), 0)
for case in ET.parse(sys.argv[1]).iter("testcase"):
    if case.get("classname", "").split(".")[-1] in files:
        outcome = ("failed" if case.find("failure") is not None or case.find("error") is not None
                   else "skipped" if case.find("skipped") is not None else "passed")
        counts[outcome] += 1
print(", ".join(f"{n} {k}" for k, n in counts.items()))
EOF2
) || integrations="not counted"

# The examples as frameworks/README.md and scripts/main.sh run them, shortened.
out=$(mktemp -d)
trap 'rm -f "$log" "$junit"; rm -rf "$out"' EXIT
run=("$VENV/bin/cerarrun" --max-time 300)
smoke() {  # smoke NAME MARKER COMMAND...: the command must exit 0 and print MARKER
  local name=$1 marker=$2
  shift 2
  echo "torch2-env: example $name"
  if "$@" >"$out/$name.log" 2>&1 && grep -q -- "$marker" "$out/$name.log"; then
    return
  fi
  tail -n 40 "$out/$name.log"
  failed+=("$name")
}
smoke numpy_allreduce "rank 0/4: sum" \
  "${run[@]}" -np 4 "$PY" examples/numpy_allreduce.py
smoke torch_train_cerar "RESULT " \
  "${run[@]}" -np 4 --algorithm cerar "$PY" examples/torch_train.py --epochs 2
smoke torch_train_ring "RESULT " \
  "${run[@]}" -np 4 --algorithm ring "$PY" examples/torch_train.py --epochs 1
smoke fusion_tuning "best: " \
  timeout 300 "$PY" examples/fusion_tuning.py -np 2 --thresholds-mb 0 8 --cycles-ms 1 \
  --steps 3 --warmup 1
smoke fidelity_digits "RESULT " \
  env CERAR_ALGORITHM=cerar "${run[@]}" -np 2 "$PY" examples/fidelity_train.py --task digits \
  --steps 20 --eval-every 10 --error-every 5 --drift-every 10 --resync-every 10
smoke fidelity_charlm "RESULT " \
  "${run[@]}" -np 2 "$PY" examples/fidelity_train.py --task charlm --steps 6 --eval-every 3 \
  --error-every 3 --drift-every 3
smoke fidelity_ddp "RESULT " \
  timeout 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 \
  examples/fidelity_train.py --backend ddp --steps 10 --eval-every 5 --error-every 5 \
  --drift-every 5
smoke fidelity_ddp_cerar "RESULT " \
  timeout 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 \
  examples/fidelity_train.py --backend ddp-cerar --steps 10 --eval-every 5 --error-every 5 \
  --drift-every 5
smoke ddp_train_cerar "RESULT " \
  timeout 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node 4 \
  examples/ddp_train.py --comm cerar --algorithm cerar --components 16 --amp --epochs 1

if ((${#failed[@]})); then
  echo "torch2-env: FAILED (${failed[*]}) on torch $TORCH; pytest: $summary;" \
    "integrations (FSDP, torchrun, Lightning, Ray Train): $integrations"
  exit 1
fi
echo "torch2-env: OK on torch $TORCH, numpy $("$PY" -c 'import numpy; print(numpy.__version__)');" \
  "pytest: $summary; integrations (FSDP, torchrun, Lightning, Ray Train): $integrations;" \
  "examples: 9 smoke runs passed"
