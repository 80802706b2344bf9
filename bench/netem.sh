#!/usr/bin/env bash
# Emulated slow cluster: N network namespaces on a bridge, each link shaped with tbf both ways.
#
#   netem.sh up     --ranks N --rate-mbit R [--name PREFIX]
#   netem.sh down   [--name PREFIX]
#   netem.sh status [--name PREFIX]
#   netem.sh run    --ranks N --rate-mbit R [--name PREFIX] -- CMD [ARGS...]   (up, CMD, down)
#
# Layout (PREFIX defaults to cerar-ns; it must not end in a digit, so prefixes never collide):
#   namespace PREFIXbr : bridge br0 with ports p0..p{N-1}      (the root namespace is untouched)
#   namespace PREFIXi  : lo, veth0 = 10.77.0.(i+1)/24           (rank i; CERAR_NETNS_IFACE=veth0)
#   tbf rate R burst 64kb latency 5ms on the egress of veth0 (rank -> bridge) and of p_i (bridge -> rank)
# Everything created is recorded, with the namespace's inode, in /run/cerar-netem/PREFIX; `down`
# deletes only what that file lists and still matches, and refuses when it finds look-alikes.
# Exit codes: 0 ok, 1 failure, 2 bad arguments, 3 not root / ip missing.
set -u
STATE_DIR=${CERAR_NETEM_STATE_DIR:-/run/cerar-netem}
BURST=64kb LATENCY=5ms IFACE=veth0
# Test hooks (only for bench/tests): fail after creating K rank namespaces / sleep between ranks.
FAIL_AFTER=${CERAR_NETEM_TEST_FAIL_AFTER:-} STEP_DELAY=${CERAR_NETEM_TEST_STEP_DELAY:-}

usage() {
  [ $# -gt 0 ] && echo "netem.sh: $*" >&2
  echo "usage:" >&2; sed -n '4,7p' "$0" | sed 's/^#  /  /' >&2
  exit 2
}
die() { echo "netem.sh: $*" >&2; exit 1; }

# --- arguments ------------------------------------------------------------------------------
[ $# -ge 1 ] || usage "missing command (up, down, status or run)"
CMD=$1; shift
case $CMD in up|down|status|run) ;; -h|--help) usage ;; *) usage "unknown command '$CMD'" ;; esac
RANKS='' RATE='' PREFIX=cerar-ns NAME_GIVEN=0
while [ $# -gt 0 ]; do
  case $1 in
    --ranks|--rate-mbit|--name) [ $# -ge 2 ] || usage "$1 needs a value" ;;&
    --ranks) RANKS=$2; shift 2 ;;
    --rate-mbit) RATE=$2; shift 2 ;;
    --name) PREFIX=$2; NAME_GIVEN=1; shift 2 ;;
    --) shift; break ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
USER_CMD=("$@")
[[ $PREFIX =~ ^[A-Za-z][A-Za-z0-9_-]{0,11}$ && ! $PREFIX =~ [0-9]$ ]] ||
  usage "--name '$PREFIX': 1-12 chars of [A-Za-z0-9_-], starting with a letter, not ending in a digit"
if [ "$CMD" = up ] || [ "$CMD" = run ]; then
  [[ $RANKS =~ ^[0-9]+$ ]] && [ "$RANKS" -ge 2 ] && [ "$RANKS" -le 64 ] ||
    usage "--ranks must be an integer in 2..64 (got '${RANKS}')"
  [[ $RATE =~ ^[0-9]+$ ]] && [ "$RATE" -ge 1 ] && [ "$RATE" -le 100000 ] ||
    usage "--rate-mbit must be an integer in 1..100000 Mbit/s, 1 Mbit = 10^6 bit (got '${RATE}')"
else
  [ -z "$RANKS$RATE" ] || usage "--ranks/--rate-mbit only apply to up and run"
fi
if [ "$CMD" = run ]; then [ ${#USER_CMD[@]} -gt 0 ] || usage "run needs '-- CMD [ARGS...]'"
elif [ ${#USER_CMD[@]} -gt 0 ]; then usage "unexpected '$*'"; fi

[ "$(id -u)" = 0 ] || { echo "netem.sh: needs root (network namespaces, veth, tc); try: sudo $0 $CMD ..." >&2; exit 3; }
command -v ip >/dev/null && command -v tc >/dev/null || { echo "netem.sh: needs iproute2 (ip, tc)" >&2; exit 3; }

BRNS=${PREFIX}br
STATE=$STATE_DIR/$PREFIX
ns_inode() { stat -L -c %i "/run/netns/$1" 2>/dev/null; }
ours() { ip netns list | awk '{print $1}' | grep -E "^${PREFIX}([0-9]+|br)\$"; }

# --- down: delete exactly what the state file lists ----------------------------------------
down() {
  local kind name ino rc=0
  if [ ! -f "$STATE" ]; then
    local left; left=$(ours)
    [ -z "$left" ] && { echo "netem.sh: nothing to take down for '$PREFIX'"; return 0; }
    echo "netem.sh: refusing: namespaces ${left//$'\n'/ } exist but were not created by netem.sh" \
         "(no $STATE); remove them yourself (ip netns del NAME)" >&2
    return 1
  fi
  while read -r kind name ino; do
    [ "$kind" = ns ] || continue
    if [ -z "$(ns_inode "$name")" ]; then continue; fi
    if [ "$(ns_inode "$name")" != "$ino" ]; then
      echo "netem.sh: not touching namespace $name: it is not the one netem.sh created" >&2; rc=1; continue
    fi
    ip netns del "$name" || rc=1
  done < <(tac "$STATE")   # newest first
  [ $rc = 0 ] && rm -f "$STATE"
  return $rc
}

# --- up -------------------------------------------------------------------------------------
# The objects are made by a child that ignores INT/TERM/HUP, so no step is cut in half and every
# namespace is recorded; a signal makes the parent raise $STOP (the child quits at the next step),
# wait for the child, then remove what the state file lists (with signals ignored).
ERR=$(mktemp) STOP=$(mktemp -u); trap 'rm -f "$ERR" "$STOP"' EXIT
check() { [ ! -e "$STOP" ] || exit 1; }
run_() { "$@" 2>"$ERR" || { echo "netem.sh: failed: $* : $(cat "$ERR")" >&2; exit 1; }; }
x() { run_ "$@"; check; }
newns() { run_ ip netns add "$1"; echo "ns $1 $(ns_inode "$1")" >>"$STATE"; check; }
shape() { x ip -n "$1" link set "$2" up; x tc -n "$1" qdisc add dev "$2" root tbf rate "${RATE}mbit" burst $BURST latency $LATENCY; }

build() {
  newns "$BRNS"
  x ip -n "$BRNS" link set lo up
  x ip -n "$BRNS" link add br0 type bridge
  x ip -n "$BRNS" link set br0 up
  local i
  for ((i = 0; i < RANKS; i++)); do
    newns "$PREFIX$i"
    x ip -n "$PREFIX$i" link set lo up
    x ip -n "$BRNS" link add "p$i" type veth peer name $IFACE netns "$PREFIX$i"
    x ip -n "$BRNS" link set "p$i" master br0
    shape "$BRNS" "p$i"
    x ip -n "$PREFIX$i" addr add "10.77.0.$((i + 1))/24" dev $IFACE
    shape "$PREFIX$i" $IFACE
    [ -n "$STEP_DELAY" ] && sleep "$STEP_DELAY" && check
    [ -n "$FAIL_AFTER" ] && [ $((i + 1)) -ge "$FAIL_AFTER" ] && x false "test hook: fail after $FAIL_AFTER ranks"
  done
  return 0
}

up() {
  [ -e "$STATE" ] && die "'$PREFIX' is already up ($STATE); run: $0 down --name $PREFIX"
  local left; left=$(ours)
  [ -z "$left" ] || die "namespaces ${left//$'\n'/ } already exist; not touching them (not created by this run)"
  mkdir -p "$STATE_DIR" && printf '# netem.sh up --ranks %s --rate-mbit %s\n' "$RANKS" "$RATE" >"$STATE" ||
    die "cannot write $STATE"
  local sig='' rc pid
  trap '' INT TERM HUP   # the child starts with them ignored
  build & pid=$!
  trap 'sig=130; : >"$STOP"' INT; trap 'sig=143; : >"$STOP"' TERM; trap 'sig=129; : >"$STOP"' HUP
  while :; do wait $pid; rc=$?; kill -0 $pid 2>/dev/null || break; done
  if [ -n "$sig" ] || [ $rc != 0 ]; then
    trap '' INT TERM HUP
    echo "netem.sh: ${sig:+interrupted; }removing what was made for '$PREFIX'" >&2
    down >/dev/null; exit "${sig:-1}"
  fi
  trap - INT TERM HUP
  echo "netem.sh: up: $RANKS ranks at ${RATE} Mbit/s per link (both ways) in namespaces ${PREFIX}0..${PREFIX}$((RANKS - 1)), bridge in $BRNS"
}

status() {
  local f p
  if [ $NAME_GIVEN = 1 ]; then set -- "$STATE"; else set -- "$STATE_DIR"/*; fi
  for f in "$@"; do
    [ -f "$f" ] || { [ $NAME_GIVEN = 1 ] && echo "netem.sh: '$PREFIX' is not up"; continue; }
    p=$(basename "$f"); echo "== $p: $(head -1 "$f" | sed 's/^# //')"
    while read -r kind name _; do
      [ "$kind" = ns ] || continue
      [ -e "/run/netns/$name" ] || { echo "  $name: MISSING"; continue; }
      if [ "$name" = "${p}br" ]; then echo "  $name: bridge br0"; continue; fi
      echo "  $name: $(ip -n "$name" -4 -br addr show $IFACE | awk '{print $1, $3}')" \
           "$(tc -n "$name" qdisc show dev $IFACE | grep -o 'rate [^ ]*')"
    done <"$f"
  done
  [ $NAME_GIVEN = 1 ] || compgen -G "$STATE_DIR/*" >/dev/null || echo "netem.sh: nothing is up"
}

case $CMD in
  up) up ;;
  down) down ;;
  status) status ;;
  run)
    up
    stop() { trap '' INT TERM HUP; kill -TERM "$child" 2>/dev/null; wait "$child"; down; exit "$1"; }
    trap 'stop 130' INT; trap 'stop 143' TERM; trap 'stop 129' HUP
    "${USER_CMD[@]}" <&0 & child=$!   # explicit stdin: keep the caller's, not /dev/null
    wait "$child"; rc=$?
    trap '' INT TERM HUP
    down || rc=1
    exit $rc ;;
esac
