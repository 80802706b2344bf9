#!/usr/bin/env bash
# The main demo: data-parallel training of an MLP on scikit-learn's digits with 4 ranks on this
# machine, once with CERAR and once with the exact ring; prints both results side by side. A
# functional check (both reach the same loss and accuracy), not a speed measurement: each run
# is a few seconds on a shared machine (docs/speed.md has the measured speeds).
# Usage: scripts/main.sh [extra torch_train.py arguments, e.g. --epochs 5]
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Measured on 2 shared cores (docs/install.md): 7 min 40 s on a fresh clone, 18 s once built.
echo "setup: installing and building (scripts/setup.sh main; the first run compiles for several"
echo "minutes on 2 cores, 7 min 40 s measured on a shared machine; later runs take seconds)"
if ! scripts/setup.sh main >"$out/setup.log" 2>&1; then
  cat "$out/setup.log"
  exit 1
fi
for algorithm in cerar ring; do
  echo
  echo "=== $algorithm: cerarrun -np $NP --algorithm $algorithm python examples/torch_train.py $*"
  .venv/bin/cerarrun -np "$NP" --algorithm "$algorithm" \
    .venv/bin/python examples/torch_train.py "$@" | tee "$out/$algorithm.log"
done
.venv/bin/python - "$out/cerar.log" "$out/ring.log" <<'PY'
import json, sys
results = []
for path in sys.argv[1:]:
    lines = [l.split("RESULT ", 1)[1] for l in open(path) if "RESULT " in l]
    results.append(json.loads(lines[-1]))
rows = [("final train loss", "train_loss", "{:.4f}"), ("final val loss", "val_loss", "{:.4f}"),
        ("final val accuracy", "val_acc", "{:.4f}"), ("samples/s", "samples_per_s", "{:.0f}"),
        ("all-reduce wait ms/step", "allreduce_ms_per_step", "{:.3f}"),
        ("buffers via CERAR", "cerar_buffers", "{}"), ("buffers via ring", "ring_buffers", "{}"),
        ("data links", "links", "{}"),
        ("wall time s", "seconds", "{:.1f}")]
print()
print("Functional check: CERAR (approximate) against the exact ring, same data and seed.")
print(f"{'':26}{'CERAR':>12}{'exact ring':>12}")
for label, key, fmt in rows:
    print(f"{label:26}" + "".join(f"{fmt.format(r.get(key)):>12}" for r in results))
cerar, ring = results
loss = abs(cerar["val_loss"] - ring["val_loss"]) / ring["val_loss"]
print(f"\nval loss differs by {100 * loss:.2f}%, val accuracy by "
      f"{100 * abs(cerar['val_acc'] - ring['val_acc']):.2f} points. samples/s and times come "
      "from one run of a few seconds\non a shared machine: not a speed measurement "
      "(measured speeds: docs/speed.md).")
PY
cat <<'EOF'

Built: the cerar package and cerarrun in .venv. To use them:
  source .venv/bin/activate
  cerarrun -np 4 python examples/numpy_allreduce.py
README.md, "Getting started", goes on from there; docs/index.md lists every page.
EOF
