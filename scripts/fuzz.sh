#!/usr/bin/env bash
# Builds the libFuzzer targets (preset "fuzz", clang) and runs each for a bounded time from the
# committed corpus tests/fuzz/corpus/<target>/. New inputs go to a scratch directory, so the
# committed corpus changes only by hand (copy from there what is worth keeping).
# Usage: scripts/fuzz.sh [SECONDS per target, default 20]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The targets run side by side (each for SECONDS of wall time), so the whole run takes SECONDS.
targets=(negotiation control_frame store_protocol)
pids=()
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target"
  echo "fuzz: $target for ${seconds}s"
  build-fuzz/tests/fuzz/fuzz_$target -max_total_time="$seconds" -max_len=4096 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="build-fuzz/" \
    "$scratch/$target" "tests/fuzz/corpus/$target" >"$scratch/$target.log" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!targets[@]}"; do
  target=${targets[$i]}
  # A crash, leak or timeout exits non-zero (the input is left in build-fuzz/): show the
  # fuzzer's report and fail.
  if ! wait "${pids[$i]}"; then
    tail -n 60 "$scratch/$target.log"
    echo "fuzz: $target failed" >&2
    status=1
  fi
  echo "fuzz: $target: $(grep -E "^stat::number_of_executed_units" "$scratch/$target.log" || true)"
done
exit $status
