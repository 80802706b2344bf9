#!/usr/bin/env bash
# Tests for bench/run_suite.py, bench/suite_report.py and cerar-bench-net.
#   bench/tests/test_suite.sh [all|args|netns]
# args : argument checking, the limit arithmetic of the report on made-up results, and a 2-rank
#        loopback smoke run of cerar-bench-net (no root needed).
# netns: a 2-rank smoke run of cerar-bench-net through runner.py across emulated links; needs
#        root and `ip netns` (alone it exits 77 when it cannot run; under `all` it prints SKIP).
# cerar-bench-net is looked for in $CERAR_BENCH_NET, then build*/; its parts SKIP without it.
# Uses the netem prefix "cerarsmk", apart from the other tests' and the suite's.
set -u
BENCH=$(cd "$(dirname "$0")/.." && pwd)
SUITE=$BENCH/run_suite.py REPORT=$BENCH/suite_report.py RUNNER=$BENCH/runner.py NETEM=$BENCH/netem.sh
TP=cs$(echo $$ | tr 0-9 a-j)  # per run: concurrent runs never share namespaces
# Below the kernel's ephemeral range (32768 up), apart from test_netem.sh's ports.
PORT=$((20000 + $$ % 9000))
PART=${1:-all}
FAILS=0 OUT=$(mktemp) TMP=$(mktemp -d)
trap 'rm -rf "$OUT" "$TMP"' EXIT
BIN=${CERAR_BENCH_NET:-}
if [ -z "$BIN" ]; then
  for d in build build-bench build-rt; do
    [ -x "$BENCH/../$d/cerar-bench-net" ] && { BIN=$BENCH/../$d/cerar-bench-net; break; }
  done
fi

ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
expect() {  # expect RC PATTERN CMD...: CMD exits with RC and its output matches the regex
  local want=$1 pat=$2; shift 2
  "$@" >"$OUT" 2>&1; local rc=$? cmd="$*"; cmd=${cmd%%$'\n'*}
  if [ $rc = "$want" ] && { [ -z "$pat" ] || grep -Eq -- "$pat" "$OUT"; }; then ok "${cmd:0:110} -> $rc"
  else bad "$cmd -> $rc (want $want, /$pat/):"; sed 's/^/     /' "$OUT" | tail -20; fi
}

args_tests() {
  echo "# run_suite.py argument checking"
  expect 2 "want N@RATE" python3 "$SUITE" --configs 4@fast --dry-run
  expect 2 "N in 2..16" python3 "$SUITE" --configs lo1 --dry-run
  expect 2 "N in 2..16" python3 "$SUITE" --configs 4@0 --dry-run
  expect 2 "sizes" python3 "$SUITE" --sizes 3 --dry-run
  expect 2 "not a byte count" python3 "$SUITE" --sizes 1Q --dry-run
  expect 2 "--repeats must be" python3 "$SUITE" --repeats 0 --dry-run
  expect 2 "--name" python3 "$SUITE" --name a/b --dry-run
  expect 0 "past what the 2 cores" python3 "$SUITE" --configs 8@400 --dry-run
  expect 0 "headline: configs \['n4-400mbit', 'n8-200mbit'\], sizes \[67108864\]" \
    python3 "$SUITE" --headline --dry-run
  expect 0 "sweep: configs \['n4-400mbit', 'n8-200mbit', 'n4-100mbit', 'n4-loopback'\]" \
    python3 "$SUITE" --dry-run
  expect 3 "not found; build it" python3 "$SUITE" --bin "$TMP/none" --configs lo2
  expect 1 "usage: suite_report" python3 "$REPORT" "$TMP/none"
  expect 0 "^161 tensors, 25557032 floats" python3 "$BENCH/resnet50_sizes.py"
  # Its copy of the cost model gives the c each committed run chose: the headline's before the
  # whole-segment charge, a sweep's with it.
  expect 0 "^\| n8-200mbit \| 64 MiB \| 928 \| yes \|" python3 "$BENCH/refit_check.py" \
    --partial-segments "$BENCH/results/headline"
  expect 0 "^\| n4-200mbit \| 64 MiB \| 512 \| yes \|" python3 "$BENCH/refit_check.py" \
    "$BENCH/results/sweep-200-segments"
  echo "# the report's limits on made-up results (N=4, B=100 Mbit/s, d=64 MiB)"
  mkdir -p "$TMP/r"
  python3 - "$TMP/r" <<'EOF'
import json, sys
row = lambda name, c, t: dict(contender=name, n=4, bytes=64 << 20, c=c, runs_s=[t], best_s=t,
                              median_s=t, max_rel_err=0)
json.dump(dict(config=dict(name="n4-100mbit", n=4, rate_mbit=100), rate_mbit=100.0,
               calibration=[dict(min_mbit=100.0)], probe=None, notes=[], command="x",
               results=[row("ring", None, 8.0), row("cerar-auto", 32, 6.0), row("torch-gloo", None, 9.0),
                        row("cerar-c8", 8, 6.6), row("cerar-c16", 16, 6.2), row("cerar-c32", 32, 5.9)]),
          open(sys.argv[1] + "/n4-100mbit.json", "w"))
EOF
  expect 0 "" /usr/bin/python3 "$REPORT" "$TMP/r"
  python3 - "$TMP/r/headline.json" <<'EOF' && ok "limits: exact 1.5 d/B, CERAR (1+2/32) d/B, floor d/B" || bad "limits"
import json, sys
h = json.load(open(sys.argv[1]))[0]
dB = (64 << 20) * 8 / 100e6                     # 5.369 s
want = dict(ring_vs_limit=8.0 / (1.5 * dB), cerar_auto_vs_limit=6.0 / ((1 + 2 / 32) * dB),
            cerar_auto_vs_floor=6.0 / dB, cerar_auto_over_torch_gloo=6.0 / 9.0)
bad = {k: (h.get(k), v) for k, v in want.items() if abs(h.get(k, 0) - v) > 1e-9}
print("     ", bad or want)
sys.exit(bool(bad))
EOF
  grep -q '^| 64 MiB | 32 | 6.000 | 1.017 | 32 | 5.900 | 1.008 | 0.017 | yes | 8.000 | 0.744 | 0.017 | yes |$' \
    "$TMP/r/results.md" && ok "selection: auto against the best c and the ring, by medians" \
    || bad "selection table"
  grep -q "over c = N..16N: .* ms per round (3 points)" "$TMP/r/results.md" \
    && ok "excess fit over the grid" || bad "excess fit"
  lossy_smoke
  if [ -z "$BIN" ]; then echo "SKIP cerar-bench-net parts: no build*/cerar-bench-net"; return 0; fi
  echo "# cerar-bench-net ($BIN)"
  expect 2 "CERAR_RANK and CERAR_SIZE" env -u CERAR_RANK "$BIN"
  expect 2 "repeats >= 1" "$BIN" --repeats 0
  expect 2 "unknown argument" "$BIN" --fast 1
  expect 2 "multiples of 4" "$BIN" --sizes 1001
  expect 0 '^\[0\] \{"contender": "gloo-ring".*"max_rel_err": 0\}' python3 "$RUNNER" --ranks 2 \
    --port $PORT --timeout 60 -- "$BIN" --sizes 64K --repeats 1 --only ring,cerar-auto,gloo-ring
  # A c off the grid named in full joins it (c = 6 at N = 2: the grid has 2, 4, 8, ...); one
  # that is no multiple of N does not.
  expect 0 '^\[0\] \{"contender": "cerar-c6", .*"c": 6,' python3 "$RUNNER" --ranks 2 \
    --port $PORT --timeout 60 -- "$BIN" --sizes 64K --repeats 1 --only cerar-c6,cerar-c7
  grep -q '"cerar-c7"' "$OUT" && bad "cerar-c7 ran at N = 2" || ok "no cerar-c7 at N = 2"
}

# The lossy contenders on 2 loopback ranks, 256 KiB: every row has a measured error, cerar's
# wires within their bounds, and the report has its time-and-error table. DDP's PowerSGD hooks
# keep a low-rank part of Gaussian noise, which is almost none of it: their error is near 1.
lossy_smoke() {
  echo "# lossy contenders, loopback smoke"
  if [ ! -x "$BENCH/../.venv/bin/python" ] || ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "SKIP lossy smoke: needs .venv and Debian's torch"; return 0
  fi
  expect 0 "results in" python3 "$SUITE" --configs lo2 --sizes 256K --repeats 1 --lossy-only \
    --max-errors 5e-3 --name smoke --outdir "$TMP/lossy"
  python3 - "$TMP/lossy" <<'EOF' && ok "lossy rows: errors measured, within bounds, table written" || bad "lossy rows"
import json, sys
run = json.load(open(sys.argv[1] + "/n2-loopback.json"))
rows = {r["contender"]: r for r in run["results"]}
want = {"torch-gloo-f32", "torch-gloo-fp16", "cerar-ring-f32", "cerar-wire-fp16", "cerar-wire-bf16",
        "cerar-wire-int8", "cerar-pycast-fp16", "cerar-pycast-bf16", "cerar-lossy-cerar",
        "cerar-lossy-auto", "cerar-budget-0.005", "torch-ddp-fp16-hook",
        "torch-ddp-powersgd1-hook", "torch-ddp-powersgd4-hook", "cerar-int8-of-fp16",
        "cerar-int8-of-bf16"}
missing = want - set(rows)
print("     ", {k: (r["max_rel_err"], r.get("predicted_error")) for k, r in rows.items()})
assert not missing, missing
assert all(0 <= r["max_rel_err"] < (2 if "powersgd" in k else 0.1) for k, r in rows.items())
for k in ("cerar-wire-fp16", "cerar-wire-bf16", "cerar-wire-int8", "cerar-int8-of-fp16",
          "cerar-int8-of-bf16"):  # bounds of max sum|g|; kappa ~ 1
    assert rows[k]["max_rel_err"] <= rows[k]["predicted_error"], k
assert rows["cerar-wire-fp16"]["wire_bytes"] == 2 and rows["cerar-wire-int8"]["wire_bytes"] == 1
assert rows["cerar-int8-of-bf16"]["wire_bytes"] == 1
assert rows["torch-ddp-fp16-hook"]["max_rel_err"] < 2e-3
assert "time and error" in open(sys.argv[1] + "/results.md").read()
EOF
}

netns_tests() {
  if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1 || ! command -v tc >/dev/null; then
    echo "SKIP namespace tests: need root, ip netns and tc"; return 77
  fi
  if [ -z "$BIN" ]; then echo "SKIP namespace tests: no build*/cerar-bench-net"; return 77; fi
  echo "# 2-rank cerar-bench-net across links shaped to 200 Mbit/s"
  expect 0 "up:" "$NETEM" up --ranks 2 --rate-mbit 200 --name $TP
  expect 0 '^\[0\] \{"contender": "cerar-auto", "impl": "cerar-bench-net", "n": 2, "bytes": 262144' \
    python3 "$RUNNER" --ranks 2 --prefix $TP --port $PORT --timeout 60 -- \
    "$BIN" --sizes 256K --repeats 1 --only ring,cerar-auto,gloo-ring,gloo-hd
  grep -q '"probe"' "$OUT" && ok "probe line printed" || bad "no probe line"
  expect 0 "" "$NETEM" down --name $TP
}

case $PART in
  args) args_tests ;;
  netns) netns_tests; [ $? = 77 ] && exit 77 ;;
  all) args_tests; netns_tests ;;
  *) echo "usage: $0 [all|args|netns]" >&2; exit 2 ;;
esac
[ $FAILS = 0 ] && echo "PASS" || { echo "$FAILS FAILED"; exit 1; }
