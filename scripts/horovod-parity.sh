#!/usr/bin/env bash
# Runs Horovod's PyTorch or TensorFlow test suite (test/parallel/test_torch.py or
# test_tensorflow.py of a Horovod checkout that the user provides) against cerar.torch or
# cerar.tensorflow: the file's `import horovod.<framework> as hvd` becomes
# `import cerar.<framework> as hvd`, and each test runs alone under `mpirun -np 2` on the CPU.
# Prints PASS/FAIL/SKIP per test and a summary. Nothing of Horovod is kept in this project;
# CI does not run this (it needs the checkout).
#
#   scripts/horovod-parity.sh HOROVOD_CHECKOUT [--framework torch|tensorflow] [-k PATTERN]
#                             [--timeout S] [--np N]
#
# Environment: PYTHON (default .venv/bin/python for torch, build-tf/venv/bin/python, made by
# scripts/tf-env.sh, for tensorflow), PARITY_OUT (default a fresh temp folder:
# each test's output from every rank is kept there).
set -uo pipefail
usage() {
  echo "usage: $0 HOROVOD_CHECKOUT [--framework torch|tensorflow] [-k PATTERN] [--timeout S]" \
    "[--np N]" >&2
  exit 2
}
[[ $# -ge 1 ]] || usage
checkout=$(cd "$1" && pwd) || usage
shift
pattern="" timeout=120 np=2 framework=torch
while [[ $# -gt 0 ]]; do
  case "$1" in
    -k) pattern=$2; shift 2 ;;
    --framework) framework=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    *) usage ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
case $framework in
  torch) suite=test_torch class=TorchTests default_python=$root/.venv/bin/python ;;
  tensorflow) suite=test_tensorflow class=TensorFlowTests
    default_python=$root/build-tf/venv/bin/python ;;
  *) usage ;;
esac
python=${PYTHON:-$default_python}
source_file=$checkout/test/parallel/$suite.py
[[ -f $source_file ]] || { echo "no $source_file" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "mpirun not found (Open MPI)" >&2; exit 2; }

work=${PARITY_OUT:-$(mktemp -d /tmp/horovod-parity.XXXXXX)}
mkdir -p "$work/test/parallel" "$work/test/utils" "$work/stubs/horovod/runner/util" "$work/logs"
sed "s/^import horovod\\.$framework as hvd\$/import cerar.$framework as hvd/" "$source_file" \
  > "$work/test/parallel/$suite.py"
# The TensorFlow suite's shared base class, as it is.
if [[ $framework == tensorflow ]]; then
  cp "$checkout/test/parallel/base_test_tensorflow.py" "$work/test/parallel/"
fi
cp "$checkout/test/utils/common.py" "$work/test/utils/"
# Only what the test helpers import at module level and this environment may lack: Horovod's
# thread helper (common.py imports it; these tests never call it), mock and cloudpickle.
touch "$work/stubs/horovod/__init__.py" "$work/stubs/horovod/runner/__init__.py" \
      "$work/stubs/horovod/runner/util/__init__.py"
# The TensorFlow files import Horovod's eager-mode helper by its full name.
mkdir -p "$work/stubs/horovod/tensorflow"
touch "$work/stubs/horovod/tensorflow/__init__.py"
cat > "$work/stubs/horovod/tensorflow/util.py" <<'EOF'
import tensorflow as tf


def _executing_eagerly():
    return tf.executing_eagerly()
EOF
cat > "$work/stubs/horovod/runner/util/threads.py" <<'EOF'
import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    thread.start()
    return thread
EOF
"$python" -c 'import mock' 2>/dev/null || echo 'from unittest.mock import *  # noqa' > "$work/stubs/mock.py"
"$python" -c 'import cloudpickle' 2>/dev/null || echo 'from pickle import *  # noqa' > "$work/stubs/cloudpickle.py"

tests=$(grep -oE '^    def (test_[A-Za-z0-9_]+)' "$work/test/parallel/$suite.py" | awk '{print $2}')
[[ -n $pattern ]] && tests=$(grep -E -- "$pattern" <<<"$tests")
mpi_flags=(--oversubscribe)
[[ $(id -u) == 0 ]] && mpi_flags+=(--allow-run-as-root)

passed=0 failed=0 skipped=0 port=$((31000 + RANDOM % 20000))
for test in $tests; do
  port=$((port + 1))
  log=$work/logs/$test
  # Each rank's own report: the rank's pytest output in $log.<rank>.
  timeout -k 10 "$timeout" mpirun -np "$np" "${mpi_flags[@]}" \
    -x CERAR_RENDEZVOUS_ADDR=127.0.0.1 -x CERAR_RENDEZVOUS_PORT=$port -x PYTHONPATH="$work/stubs" \
    -x CERAR_LOG_LEVEL=error -x COLUMNS=200 \
    sh -c "cd '$work/test/parallel' && exec '$python' -m pytest -p no:cacheprovider -q -rA \
           '$suite.py::$class::$test' > '$log.'\$OMPI_COMM_WORLD_RANK 2>&1" \
    > "$log.mpirun" 2>&1
  rc=$?
  result=PASS reason=""
  for ((r = 0; r < np; r++)); do
    # pytest's summary line ("PASSED file::test", "SKIPPED [1] file:line: why"), not a captured
    # log record that starts with its level ("ERROR    tensorflow:...").
    line=$(grep -E "^((PASSED|FAILED|ERROR) [^ ]+::|SKIPPED \[)" "$log.$r" 2>/dev/null | head -1)
    case "$line" in
      PASSED*) ;;
      SKIPPED*) [[ $result == PASS ]] && result=SKIP reason=${line#*: } ;;
      FAILED*|ERROR*)
        # The first error line pytest printed for this rank: the exception and its message.
        [[ $result == FAIL ]] ||
          reason="rank $r: $(grep -m1 -E '^E +' "$log.$r" | sed -E 's/^E +//' | cut -c1-150)"
        result=FAIL ;;
      *) [[ $result == FAIL ]] || reason="no result from rank $r"; result=FAIL ;;
    esac
  done
  [[ $rc == 124 || $rc == 137 ]] && result=FAIL reason="hung (killed after ${timeout} s)"
  [[ $result == PASS && $rc != 0 ]] && result=FAIL reason="mpirun exit $rc"
  case $result in PASS) passed=$((passed + 1)) ;; FAIL) failed=$((failed + 1)) ;; SKIP) skipped=$((skipped + 1)) ;; esac
  printf '%-4s %s%s\n' "$result" "$test" "${reason:+  ($reason)}"
done
echo "summary: $passed passed, $failed failed, $skipped skipped of $((passed + failed + skipped)) (logs: $work/logs)"
