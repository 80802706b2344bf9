#!/usr/bin/env bash
# cerar-conformance: bad arguments exit 2 with a message; a good run writes the arrays and one
# JSON line whose counts match the spec; gloo and inproc give the same bits.
# Usage: conformance_test.sh PATH/TO/cerar-conformance
set -u
tool=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failures=0

expect_usage_error() {  # expected message fragment, then arguments
  local fragment=$1
  shift
  local stderr code
  stderr=$("$tool" "$@" 2>&1 >/dev/null)
  code=$?
  if [ "$code" -ne 2 ] || ! grep -q -- "$fragment" <<<"$stderr"; then
    echo "FAIL: $* -> exit $code, stderr: $stderr (wanted exit 2 and '$fragment')"
    failures=$((failures + 1))
  fi
}

base=(--np 4 --elements 1000 --out "$out/x")
expect_usage_error "multiple of --np" "${base[@]}" --algorithm cerar --components 6
expect_usage_error "positive finite" "${base[@]}" --algorithm cerar --eps 0
expect_usage_error "positive finite" "${base[@]}" --algorithm cerar --eps nan
expect_usage_error "unsupported dtype" "${base[@]}" --algorithm cerar --dtype i32
expect_usage_error "unknown algorithm" "${base[@]}" --algorithm tree
expect_usage_error "--transport must be" "${base[@]}" --algorithm ring --transport mpi
expect_usage_error "missing --elements" --np 4 --algorithm ring --out "$out/x"
expect_usage_error "unknown argument" "${base[@]}" --algorithm ring --fast

json=$("$tool" --np 4 --algorithm cerar --components 16 --eps 1e-3 --elements 100003 --seed 9 \
  --transport gloo --dtype f32 --out "$out/gloo") || { echo "FAIL: gloo run"; failures=$((failures + 1)); }
"$tool" --np 4 --algorithm cerar --components 16 --eps 1e-3 --elements 100003 --seed 9 \
  --transport inproc --dtype f32 --out "$out/inproc" >/dev/null || failures=$((failures + 1))
python3 - "$json" "$out" <<'PY' || failures=$((failures + 1))
import json, os, sys
j = json.loads(sys.argv[1])
out = sys.argv[2]
assert j["rounds"] == 16 + 4 - 2, j
ideal = (1 + 2 / 16) * j["elements"] * 4
assert all(abs(b - ideal) <= 4 * j["rounds"] for b in j["bytes_sent_per_rank"]), j
assert 1e-5 < j["max_rel_err_vs_fp64"] < 2e-3, j
for rank in range(4):
    for kind in ("in", "out"):
        a = open(f"{out}/gloo/rank{rank}.{kind}", "rb").read()
        b = open(f"{out}/inproc/rank{rank}.{kind}", "rb").read()
        assert len(a) == 4 * j["elements"] and a == b, (rank, kind)
PY
[ "$failures" -eq 0 ] && echo PASS || { echo "$failures failure(s)"; exit 1; }
