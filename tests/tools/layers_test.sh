#!/usr/bin/env bash
# The build's layers point down only: each probe (cmake/layers.cmake) includes a header of the
# layer above its own and must fail to compile because that header is not on its include path.
# Usage: layers_test.sh BUILD_DIR TARGET:HEADER...
set -uo pipefail
build=$1
shift
status=0
for probe in "$@"; do
  target=${probe%%:*} header=${probe#*:}
  if output=$(cmake --build "$build" --target "$target" 2>&1); then
    echo "FAIL: $target compiled: a layer below can include $header"
    status=1
  elif ! grep -q "$header: No such file" <<<"$output"; then
    echo "FAIL: $target failed for another reason than the missing $header:"
    echo "$output" | tail -n 20
    status=1
  else
    echo "ok: $target cannot include $header"
  fi
done
exit $status
