#!/usr/bin/env bash
# Tests for bench/netem.sh, bench/tcp_ring.py and bench/runner.py (and, through
# tests/test_suite.sh, for run_suite.py and cerar-bench-net).
#   bench/tests/test_netem.sh [all|args|netns]
# args : argument checking and loopback smoke runs (no root needed).
# netns: up/down/clean-up (also after failure and interruption) and a 2-rank smoke run in
#        namespaces; needs root and `ip netns`. Alone it exits 77 when it cannot run (ctest:
#        SKIP_RETURN_CODE 77); under `all` it prints SKIP and passes.
# Uses a prefix of its own per run ("ct" + the process id in letters), so it never clashes with a
# manual run (default prefix cerar-ns) nor with another test run on the same machine.
set -u
BENCH=$(cd "$(dirname "$0")/.." && pwd)
NETEM=$BENCH/netem.sh RUNNER=$BENCH/runner.py RING=$BENCH/tcp_ring.py
TP=ct$(echo $$ | tr 0-9 a-j)
# Below the kernel's ephemeral range (32768 up), where concurrent tests' connections and
# port-0 listeners would sometimes hold a port of ours.
PORT=$((10000 + $$ % 10000))
PART=${1:-all}
FAILS=0 OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
# expect RC PATTERN CMD...: CMD exits with RC and its output matches the regex PATTERN
expect() {
  local want=$1 pat=$2; shift 2
  "$@" >"$OUT" 2>&1; local rc=$? cmd="$*"; cmd=${cmd%%$'\n'*}
  if [ $rc = "$want" ] && { [ -z "$pat" ] || grep -Eq -- "$pat" "$OUT"; }; then ok "$cmd -> $rc"
  else bad "$cmd -> $rc (want $want, /$pat/):"; sed 's/^/     /' "$OUT"; fi
}
left_behind() { ip netns list | awk '{print $1}' | grep -E "^${TP}([0-9]+|br)\$"; [ -e /run/cerar-netem/$TP ] && echo state; }
expect_clean() {
  local l; l=$(left_behind)
  if [ -z "$l" ]; then ok "nothing left behind ($*)"; else bad "left behind ($*): ${l//$'\n'/ }"; fi
}

args_tests() {
  echo "# argument checking"
  expect 2 "missing command" "$NETEM"
  expect 2 "unknown command" "$NETEM" start
  expect 2 "--ranks must be" "$NETEM" up --rate-mbit 100
  expect 2 "--ranks must be" "$NETEM" up --ranks 1 --rate-mbit 100
  expect 2 "--ranks must be" "$NETEM" up --ranks two --rate-mbit 100
  expect 2 "--rate-mbit must be" "$NETEM" up --ranks 2
  expect 2 "--rate-mbit must be" "$NETEM" up --ranks 2 --rate-mbit 0
  expect 2 "--rate-mbit must be" "$NETEM" up --ranks 2 --rate-mbit 1.5
  expect 2 "--name" "$NETEM" up --ranks 2 --rate-mbit 100 --name ns1
  expect 2 "--name" "$NETEM" down --name 'a b'
  expect 2 "needs a value" "$NETEM" up --ranks
  expect 2 "only apply to up" "$NETEM" down --ranks 2
  expect 2 "run needs" "$NETEM" run --ranks 2 --rate-mbit 100
  expect 2 "unknown argument" "$NETEM" status --fast
  expect 2 "missing '-- CMD" python3 "$RUNNER" --ranks 2
  expect 2 "--ranks must be" python3 "$RUNNER" --ranks 0 -- true
  expect 2 "--timeout must be" python3 "$RUNNER" --ranks 2 --timeout 0 -- true
  expect 2 "not a byte count" python3 "$RING" --ranks 2 --bytes 3x
  expect 2 "--ranks must be" python3 "$RING" --ranks 1 --bytes 1M
  echo "# loopback smoke runs"
  expect 0 '^\[1\] 1/2 127.0.0.1:29500 r1$' python3 "$RUNNER" --ranks 2 -- \
    sh -c 'echo $CERAR_RANK/$CERAR_SIZE $CERAR_RENDEZVOUS_ADDR:$CERAR_RENDEZVOUS_PORT r{rank}'
  expect 7 "exit codes \[-15, 7\]" python3 "$RUNNER" --ranks 2 -- \
    sh -c '[ $CERAR_RANK = 1 ] && exit 7; exec sleep 30'
  expect 124 "timeout" python3 "$RUNNER" --ranks 2 --timeout 0.5 -- sleep 30
  expect 0 '"min_mbit"' python3 "$RING" --ranks 3 --bytes 4M --port $PORT
}

netns_tests() {
  if [ "$(id -u)" != 0 ]; then echo "SKIP netns tests: not root"; return 77; fi
  if ! ip netns list >/dev/null 2>&1; then echo "SKIP netns tests: 'ip netns' unavailable"; return 77; fi
  if ! command -v tc >/dev/null; then echo "SKIP netns tests: tc unavailable"; return 77; fi
  "$NETEM" down --name $TP >/dev/null 2>&1  # a previous, aborted test run
  [ -z "$(left_behind)" ] || { bad "stale $TP objects not made by netem.sh: $(left_behind | tr '\n' ' ')"; return 1; }
  trap '"$NETEM" down --name $TP >/dev/null 2>&1; rm -f "$OUT"' EXIT
  echo "# up / status / down"
  expect 0 "up: 2 ranks at 100 Mbit/s" "$NETEM" up --ranks 2 --rate-mbit 100 --name $TP
  expect 0 "${TP}1: veth0@\S+ 10.77.0.2/24 rate 100Mbit" "$NETEM" status --name $TP
  expect 1 "already up" "$NETEM" up --ranks 2 --rate-mbit 100 --name $TP
  expect 0 "" "$NETEM" down --name $TP
  expect_clean "after down"
  expect 0 "nothing to take down" "$NETEM" down --name $TP
  echo "# foreign objects are left alone"
  ip netns add ${TP}0
  expect 1 "already exist" "$NETEM" up --ranks 2 --rate-mbit 100 --name $TP
  expect 1 "refusing" "$NETEM" down --name $TP
  if [ -e /run/netns/${TP}0 ]; then ok "foreign ${TP}0 untouched"; else bad "foreign ${TP}0 deleted"; fi
  ip netns del ${TP}0
  expect_clean "after a refused up"
  echo "# clean-up after failure and interruption"
  expect 1 "removing what was made" env CERAR_NETEM_TEST_FAIL_AFTER=2 "$NETEM" up --ranks 3 --rate-mbit 100 --name $TP
  expect_clean "after a failed up"
  set -m  # own process groups, so background jobs do not ignore SIGINT
  CERAR_NETEM_TEST_STEP_DELAY=1 "$NETEM" up --ranks 3 --rate-mbit 100 --name $TP >/dev/null 2>&1 &
  local pid=$!; sleep 1.5; kill -INT $pid; wait $pid; local rc=$?
  [ $rc = 130 ] && ok "interrupted up -> 130" || bad "interrupted up -> $rc"
  expect_clean "after an interrupted up"
  "$NETEM" run --ranks 2 --rate-mbit 100 --name $TP -- sleep 60 >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 50); do [ -e /run/netns/${TP}1 ] && break; sleep 0.1; done
  sleep 0.5; kill -INT $pid; wait $pid; rc=$?
  set +m
  [ $rc = 130 ] && ok "interrupted run -> 130" || bad "interrupted run -> $rc"
  expect_clean "after an interrupted run"
  echo "# 2-rank smoke runs at 100 Mbit/s"
  expect 0 "up:" "$NETEM" up --ranks 2 --rate-mbit 100 --name $TP
  expect 0 '"min_mbit"' python3 "$RING" --ranks 2 --bytes 8M --netns-prefix $TP
  python3 - "$OUT" <<'EOF' && ok "calibrated rate within 50..105% of 100 Mbit/s" || bad "calibrated rate"
import json, sys
r = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
print("     ", r["rank_mbit"], "min", r["min_mbit"])
sys.exit(not 50 <= r["min_mbit"] <= 105)
EOF
  # rank 1 sends 1 MiB to rank 0 at the rendezvous address, across the emulated links
  expect 0 '^\[0\] got 1048576 bytes on veth0' python3 "$RUNNER" --ranks 2 --prefix $TP --port $PORT --timeout 20 -- \
    python3 -c '
import os, socket, time
a = (os.environ["CERAR_RENDEZVOUS_ADDR"], int(os.environ["CERAR_RENDEZVOUS_PORT"]))
if os.environ["CERAR_RANK"] == "0":
    s = socket.create_server(a); c, _ = s.accept(); n = 0
    while (b := c.recv(65536)): n += len(b)
    print("got", n, "bytes on", os.environ["CERAR_NETNS_IFACE"])
else:
    for _ in range(50):
        try: c = socket.create_connection(a); break
        except OSError: time.sleep(0.1)
    c.sendall(bytes(1 << 20)); c.close()'
  expect 0 "" "$NETEM" down --name $TP
  expect_clean "at the end"
}

# The suite's own tests (run_suite.py, cerar-bench-net) ride along with the matching part.
suite_tests() {
  "$BENCH/tests/test_suite.sh" "$1"; local rc=$?
  case $rc in 0) ok "test_suite.sh $1" ;; 77) echo "SKIP test_suite.sh $1" ;; *) bad "test_suite.sh $1" ;; esac
}

case $PART in
  args) args_tests; suite_tests args ;;
  netns) netns_tests; [ $? = 77 ] && exit 77; suite_tests netns ;;
  all) args_tests; suite_tests args; netns_tests && suite_tests netns ;;
  *) echo "usage: $0 [all|args|netns]" >&2; exit 2 ;;
esac
[ $FAILS = 0 ] && echo "PASS" || { echo "$FAILS FAILED"; exit 1; }
