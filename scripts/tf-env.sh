#!/usr/bin/env bash
# cerar on TensorFlow 2: the pinned environment scripts/envs/tf.txt (tensorflow-cpu, keras 3 and
# jax from PyPI; scripts/envs/pinned-env.sh makes it, once per machine, outside the clone), cerar
# built for it, the TensorFlow and Keras modules of the Python suite and the examples' smoke runs
# there, with deprecation warnings as errors. CI runs it: `scripts/test.sh --envs`.
#
# Usage: scripts/tf-env.sh [pytest arguments]
#   (none)  CI's selection: the modules of MODULES below, then the smoke runs.
#   pytest arguments: one pytest run with them (e.g. tests/python/test_tensorflow.py -x).
#
# Disk: the environment takes about 2.1 GiB (jax for Keras's JAX backend included); building it
# downloads about 400 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
# What the build needs from Debian (compiler, Gloo, Boost.Asio), where missing.
scripts/setup.sh test --no-build
source scripts/envs/pinned-env.sh
pinned_env tf
TF=$("$PY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)

# The modules whose ranks drive TensorFlow through cerar (test_keras: Keras's tensorflow and jax
# backends), and the doc check of its names.
MODULES=(test_keras test_tensorflow test_from_horovod)

# Deprecations are errors wherever cerar, the tests or the example call TensorFlow or numpy.
# The last lines exempt warnings that third-party packages raise inside their own modules when
# merely imported (TensorFlow's, Keras's and JAX's own, of their dependencies): not cerar's to fix.
strict_warnings \
  "error::DeprecationWarning" \
  "error::PendingDeprecationWarning" \
  "error::FutureWarning" \
  "default::Warning:(tensorflow|keras|absl|google|flatbuffers|h5py|ml_dtypes|optree)(\\.|$)" \
  "default::Warning:(jax|jaxlib|scipy|opt_einsum)(\\.|$)"
# The TensorFlow tests fail here, instead of skipping, when TensorFlow is missing.
export CERAR_REQUIRE_TF=1
# TensorFlow's C++ start-up chatter (oneDNN, CPU features) on every rank's stderr.
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}

failed=()
t=$SECONDS
case "${1:-}" in
  "") run_modules "${MODULES[@]}" ;;
  *)
    echo "tf-env: python -m pytest $* (tensorflow $TF)"
    "$PY" -m pytest -p no:cacheprovider -o filterwarnings="$CERAR_WARNING_FILTERS" "$@"
    exit ;;
esac
echo "tf-env: pytest modules took $((SECONDS - t)) s"

t=$SECONDS
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run=("$(dirname "$PY")/cerarrun" --max-time 300)
smoke tensorflow_train "RESULT " \
  "${run[@]}" -np 2 "$PY" examples/tensorflow_train.py --steps 20
smoke keras_train_jax "RESULT " \
  env KERAS_BACKEND=jax JAX_PLATFORMS=cpu "${run[@]}" -np 2 "$PY" examples/keras_train.py \
  --epochs 2 --steps 5
echo "tf-env: examples took $((SECONDS - t)) s"

if ((${#failed[@]})); then
  echo "tf-env: FAILED on tensorflow $TF: ${failed[*]}"
  exit 1
fi
echo "tf-env: OK on tensorflow $TF, numpy $("$PY" -c 'import numpy; print(numpy.__version__)')"
