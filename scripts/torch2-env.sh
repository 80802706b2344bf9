#!/usr/bin/env bash
# cerar on torch 2.x: the pinned environment scripts/envs/torch2.txt (torch 2.15.0 from PyPI,
# lightning, ray[train], jax, keras; scripts/envs/pinned-env.sh makes it, once per machine,
# outside the clone), cerar built for it, the torch modules of the Python suite and the
# examples' smoke runs there, with deprecation warnings as errors. CI runs it:
# `scripts/test.sh --envs`.
#
# Usage: scripts/torch2-env.sh [--all | pytest arguments]
#   (none)  CI's selection: the modules of MODULES below, two at a time, then the smoke runs.
#   --all   every module of tests/python the same way, then the smoke runs.
#   pytest arguments: one pytest run with them (e.g. tests/python/test_fsdp.py -k sharded).
#
# Disk: the environment takes about 6.5 GiB, 5.2 GiB of it the CUDA build of torch (PyPI's
# `pip install torch` brings triton and the nvidia-* CUDA libraries although only the CPU is
# used here); pip keeps no second copy (--no-cache-dir). Building it downloads about 3 GiB.
set -euo pipefail
cd "$(dirname "$0")/.."
# What the build and the tests need from Debian (emulated hosts, Open MPI), where missing.
scripts/setup.sh test --no-build
source scripts/envs/pinned-env.sh
pinned_env torch2
TORCH=$("$PY" -c 'import torch; print(torch.__version__)')

# The modules CI runs here, the longest first: every one whose ranks drive torch through cerar
# (cerar.torch, the DDP hook, the backend, FSDP, torchrun, Lightning, Ray Train, Horovod's API
# and its parity, the elastic API's torch state and sampler, Keras's torch backend). The others
# run on Debian's torch only, in scripts/test.sh's release tests: those of numpy, jax, Ray, the
# launcher, the runtime and rendezvous, whose code does not change with torch's version, and
# test_elastic, which drives the elastic driver across emulated hosts (2.5 min; its torch parts
# are test_elastic_api's).
MODULES=(
  test_fsdp test_ray_train test_lightning test_keras test_adasum test_dist_backend test_ddp
  test_torch test_elastic_api test_torchrun test_process_sets test_horovod_parity test_scatter_join
  test_torch_compat test_sync_batch_norm test_frontend test_timeline test_from_horovod test_api
  test_torch_cuda
)

# Deprecations are errors: DeprecationWarning, PendingDeprecationWarning, FutureWarning, and the
# UserWarnings by which torch announces deprecated APIs (their text says "deprecated"), wherever
# cerar, the tests or the examples call torch, numpy or jax. The last lines exempt warnings
# that third-party packages raise inside their own modules (named explicitly, as a regular
# expression matched at the start of the warning's module) when merely imported or used by
# torch, the examples' data loading, jax, Keras, Lightning or Ray Train: not cerar's to fix, so
# they are shown once and do not fail the run (lightning 2.6.6 warns that its own _pytree.py uses a
# deprecated torch API). cerar's code and the tests still may not warn.
strict_warnings \
  "error::DeprecationWarning" \
  "error::PendingDeprecationWarning" \
  "error::FutureWarning" \
  "error:.*deprecat:UserWarning" \
  "default::Warning:(sklearn|scipy|sympy|networkx|triton|jaxlib|ml_dtypes|opt_einsum)(\\.|$)" \
  "default::Warning:(lightning|lightning_fabric|lightning_utilities|pytorch_lightning)(\\.|$)" \
  "default::Warning:(torchmetrics|ray|pyarrow|pandas|pydantic|fsspec|tensorboardX)(\\.|$)" \
  "default::Warning:(keras|absl|h5py|optree|namex|rich)(\\.|$)"
# The integrations' tests fail here, instead of skipping, when a package is missing
# (tests/python/torch_ranks.py): running them is this environment's reason to be.
export CERAR_REQUIRE_TORCH2=1

failed=()
t=$SECONDS
case "${1:-}" in
  "") run_modules "${MODULES[@]}" ;;
  --all)
    others=()
    for path in tests/python/test_*.py; do
      module=$(basename "$path" .py)
      [[ " ${MODULES[*]} " == *" $module "* ]] || others+=("$module")
    done
    run_modules "${MODULES[@]}" "${others[@]}" ;;
  *)
    echo "torch2-env: python -m pytest $* (torch $TORCH)"
    "$PY" -m pytest -p no:cacheprovider -o filterwarnings="$CERAR_WARNING_FILTERS" "$@"
    exit ;;
esac
echo "torch2-env: pytest modules took $((SECONDS - t)) s"

# The examples as frameworks/README.md and scripts/main.sh run them, shortened.
t=$SECONDS
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run=("$(dirname "$PY")/cerarrun" --max-time 300)
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

echo "torch2-env: examples took $((SECONDS - t)) s"

if ((${#failed[@]})); then
  echo "torch2-env: FAILED on torch $TORCH: ${failed[*]}"
  exit 1
fi
echo "torch2-env: OK on torch $TORCH, numpy $("$PY" -c 'import numpy; print(numpy.__version__)')"
