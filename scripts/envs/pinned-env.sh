# Sourced by scripts/<name>-env.sh (bash): `pinned_env <name>` makes the pinned environment
# scripts/envs/<name>.txt ready and cerar built for it, and sets PY, the interpreter to run.
#
# The packages live outside the clone, in a venv on /usr/bin/python3 (no system site-packages)
# named by a hash of the pins (not of the comments) and the interpreter:
#   ${CERAR_ENV_CACHE:-~/.cache/cerar}/<name>-<hash>/
# so every clone and every later run on the machine reuses it, and raising a pin builds a new
# one. It is complete once it holds the file `complete`, and is not written after that (a
# killed build is removed and redone). cerar is not installed there, since clones at different
# commits share it: each clone has build-<name>/, a venv without packages of its own that sees
# the cached one's (a .pth file) and holds cerar, from a wheel built in build-pinned/ when the
# sources or the build's packages changed, so once per run on a clean clone for every
# environment that pins the same build packages.

pinned_env() {
  local name=$1
  local pins=scripts/envs/$name.txt
  local cache=${CERAR_ENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cerar}
  local key
  # The pins without their comments: rewording the file's header does not rebuild 6 GiB.
  key=$( (/usr/bin/python3 -c 'import platform, sys; print(sys.version, platform.machine())'
    grep -v -e '^#' -e '^[[:space:]]*$' "$pins") | sha256sum | cut -c1-16)
  ENV_DIR=$cache/$name-$key
  mkdir -p "$cache"
  # One build at a time per environment name: CI runs and clones of one machine share the cache.
  (
    flock 9
    if [ ! -e "$ENV_DIR/complete" ]; then
      rm -rf "$ENV_DIR"
      echo "$name-env: installing $(grep -c '==' "$pins") pinned packages ($pins) into $ENV_DIR"
      local t=$SECONDS
      /usr/bin/python3 -m venv "$ENV_DIR"
      # --no-cache-dir: pip would keep a second copy of every wheel (3 GB for torch's CUDA
      # libraries). --no-deps: the file lists every package; pip check proves it consistent.
      "$ENV_DIR/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir \
        --no-deps --only-binary=:all: -r "$pins"
      "$ENV_DIR/bin/python" -m pip check >/dev/null
      echo "$pins" >"$ENV_DIR/complete"
      echo "$name-env: $ENV_DIR built in $((SECONDS - t)) s ($(du -sh "$ENV_DIR" | cut -f1))"
    else
      echo "$name-env: $ENV_DIR (built before)"
    fi
    touch "$ENV_DIR"  # the last use, for the pruning below
    # Environments of older pins: removed once unused for two weeks (each takes gigabytes).
    find "$cache" -mindepth 1 -maxdepth 1 -type d -name "$name-*" ! -path "$ENV_DIR" \
      -mtime +14 -exec rm -rf {} +
  ) 9>"$cache/$name.lock"

  local here=$PWD/build-$name
  PY=$here/venv/bin/python
  local env_site site
  env_site=$("$ENV_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  if ! grep -qsxF "import site; site.addsitedir('$env_site')" "$here/venv.pth"; then
    rm -rf "$here"
    /usr/bin/python3 -m venv --without-pip "$here/venv"
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    # addsitedir, not a bare path: the cached venv's own .pth files must run too.
    echo "import site; site.addsitedir('$env_site')" >"$site/cerar-pinned-env.pth"
    # The cached venv's commands (ray, torchrun, pytest), started by this interpreter: with
    # theirs, cerar would not import in them or in the processes they start.
    local command
    for command in "$ENV_DIR"/bin/*; do
      [ ! -e "$here/venv/bin/${command##*/}" ] &&
        [ "$(head -n 1 "$command")" = "#!$ENV_DIR/bin/python" ] || continue
      { echo "#!$PY"; tail -n +2 "$command"; } >"$here/venv/bin/${command##*/}"
      chmod +x "$here/venv/bin/${command##*/}"
    done
    cp "$site/cerar-pinned-env.pth" "$here/venv.pth"
  fi

  # cerar, as scripts/setup.sh builds it (no build isolation: the environment's
  # scikit-build-core and pybind11 build it), as a wheel in build-pinned/<key>/, installed into
  # build-<name>/venv only (--no-deps). The key hashes the sources and what the build takes from
  # the environment (the interpreter, pybind11, numpy, scikit-build-core): environments that pin
  # the same build it once per change of the sources, not once each.
  local key wheels=$PWD/build-pinned wheel f
  key=$( (/usr/bin/python3 -c 'import platform, sys; print(sys.version, platform.machine())'
    grep -i -E '^(pybind11|numpy|scikit[-_]build[-_]core)==' "$pins" | tr 'A-Z-' 'a-z_' | sort
    find pyproject.toml CMakeLists.txt cmake bindings frameworks common rendezvous core ops \
      -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.py' \
      -o -name '*.txt' -o -name '*.cmake' -o -name '*.toml' \) -print0 | sort -z |
      xargs -0 sha256sum) | sha256sum | cut -c1-16)
  wheel=""
  for f in "$wheels/$key"/cerar-*.whl; do [ -e "$f" ] && wheel=$f; done
  if [ -z "$wheel" ]; then
    echo "$name-env: pip wheel . (cerar, built in build-pinned/cmake)"
    local t=$SECONDS
    rm -rf "${wheels:?}/$key"
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
      "$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
      --config-settings=build-dir="$wheels/cmake" -w "$wheels/$key" .
    for f in "$wheels/$key"/cerar-*.whl; do wheel=$f; done
    echo "$name-env: cerar built in $((SECONDS - t)) s"
    # Wheels of older sources: this clone's, removed once unused for two weeks.
    find "$wheels" -mindepth 1 -maxdepth 1 -type d ! -name cmake ! -name "$key" -mtime +14 \
      -exec rm -rf {} +
  fi
  touch "$wheels/$key"
  if [ "$(cat "$here/cerar-build.stamp" 2>/dev/null)" != "$key" ] ||
      ! "$PY" -c 'import cerar' 2>/dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"
    echo "$key" >"$here/cerar-build.stamp"
  fi
}

# strict_warnings FILTER...: every Python process of the run (pytest, its workers, cerarrun's
# ranks, the examples) applies these filters (pytest's filterwarnings syntax, later ones win),
# through scripts/strict-warnings/sitecustomize.py; run_modules passes them to pytest itself.
strict_warnings() {
  CERAR_WARNING_FILTERS=$(printf '%s\n' "$@")
  export CERAR_WARNING_FILTERS
  export PYTHONPATH=$PWD/scripts/strict-warnings${PYTHONPATH:+:$PYTHONPATH}
}

# run_modules NAME...: tests/python/NAME.py on $PY, each in its own pytest, two at a time (the
# longest should come first), as ctest runs .venv's. One line per module; a failing module's
# output and every skip's reason are printed. Appends the failed ones to the array `failed`.
run_modules() {
  local logs module pids=() n=0
  logs=$(mktemp -d)
  for module in "$@"; do
    if ((n++ >= 2)); then wait -n || true; fi
    (
      t=$SECONDS
      # Those that make network namespaces (emulated hosts) take them one at a time.
      lock=$logs/$module.lock
      case $module in test_multihost | test_ray | test_elastic) lock=$logs/netns.lock ;; esac
      if flock "$lock" "$PY" -m pytest -q -rs -p no:cacheprovider \
          -o filterwarnings="${CERAR_WARNING_FILTERS:-}" "tests/python/$module.py" \
          >"$logs/$module.log" 2>&1; then
        result=passed
      else
        result=FAILED
        touch "$logs/$module.failed"
      fi
      echo "$module: $result in $((SECONDS - t)) s ($(tail -n 1 "$logs/$module.log" |
        tr -d '=' | sed 's/^ *//; s/ *$//'))"
      grep '^SKIPPED' "$logs/$module.log" | sed 's/^/  /' || true
    ) &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  for module in "$@"; do
    if [ -e "$logs/$module.failed" ]; then
      echo "==== $module (failed) ===="
      cat "$logs/$module.log"
      failed+=("$module")
    fi
  done
  rm -rf "$logs"
}

# smoke NAME MARKER COMMAND...: an example's short run, which must exit 0 and print MARKER. Its
# output goes to $out/NAME.log (the caller's folder); a failure prints the log's end and appends
# NAME to the array `failed`.
smoke() {
  local name=$1 marker=$2 t=$SECONDS
  shift 2
  if "$@" >"$out/$name.log" 2>&1 && grep -q -- "$marker" "$out/$name.log"; then
    echo "example $name: passed in $((SECONDS - t)) s"
    return
  fi
  echo "example $name: FAILED in $((SECONDS - t)) s"
  tail -n 40 "$out/$name.log"
  failed+=("$name")
}
