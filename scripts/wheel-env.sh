#!/usr/bin/env bash
# The wheel where nothing of the build machine helps: scripts/wheel.sh's wheel pip-installed
# with PyPI's numpy into a brand-new venv (no system site-packages), then a 2-rank all-reduce
# through it with Debian's Gloo, hiredis, ibverbs, libnl and every CUDA library hidden from the
# loader (a mount namespace in which those files read as empty), and once more with the CUDA
# libraries present but no GPU. Where scripts/torch2-env.sh's cached environment exists, its
# torch (and the NCCL its nvidia packages bring) is added to the venv and cerar.torch is checked
# too. CI runs it with the other environments: `scripts/test.sh --envs`. Needs root (mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh main
scripts/wheel.sh
wheel=$(ls dist/cerar-*-cp311-cp311-manylinux*.whl)
root=$PWD
here=$root/build/wheel/check
venv=$here/venv
PY=$venv/bin/python

# The venv, new every run; the install timed (numpy comes from pip's cache after the first).
rm -rf "$here"
mkdir -p "$here"
t=$SECONDS
/usr/bin/python3 -m venv "$venv"
"$PY" -m pip install -q --disable-pip-version-check "$wheel" numpy==2.4.6
echo "wheel-env: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) and numpy installed" \
  "into a new venv in $((SECONDS - t)) s"

# torch from the pinned torch 2.x environment, when this machine has it (3 GB: not fetched here).
cache=${CERAR_ENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cerar}
torch_env=$(ls -dt "$cache"/torch2-*/ 2>/dev/null | while read -r d; do
  [ -e "$d/complete" ] && echo "${d%/}" && break; done || true)
nccl_expect=any torch_pth=
if [ -n "$torch_env" ]; then
  site=$("$torch_env/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  own=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  torch_pth=$own/zz-torch2-env.pth
  echo "import site; site.addsitedir('$site')" >"$torch_pth"
  [ -d "$site/nvidia/nccl/lib" ] && nccl_expect=$site/nvidia/nccl/lib
  echo "wheel-env: torch from $torch_env"
fi

extension=$(ls "$venv"/lib/python3*/site-packages/cerar/_cerar*.so)
# Every file the loader could take Gloo's libraries or CUDA's from, outside the venv.
hidden=$( (ldconfig -p | grep -E 'lib(gloo|hiredis|ibverbs|nl-3|nl-route-3|cudart|nccl|cuda)\.so' |
    sed 's/.*=> //'
  ls /usr/local/cuda*/lib*/lib{cudart,nccl}*.so* /usr/local/cuda*/targets/*/lib/lib{cudart,nccl}*.so* \
    2>/dev/null || true) | xargs -r readlink -f | sort -u)

# Without torch's NCCL or the system's, no NCCL anywhere: the second check expects none too.
[ "$nccl_expect" = any ] && ! grep -q nccl <<<"$hidden" && nccl_expect=none

# Two ranks of tests/wheel/rank_check.py, run outside the clone with the venv's cerarrun and
# python; $1: the NCCL the ranks must find (rank_check.py's EXPECT_NCCL).
ranks() {
  (cd "$here" && PATH=$venv/bin:$PATH timeout 120 cerarrun -np 2 python \
    "$root/tests/wheel/rank_check.py" "$venv" "$1")
}

# In its own mount namespace: the files above bound over by /dev/null (they read as empty),
# then ldd and the ranks. `cerarrun` and `python` are the venv's.
check_hidden() {
  local f
  for f in $hidden; do mount --bind /dev/null "$f"; done
  echo "wheel-env: hidden from the loader: $(echo "$hidden" | wc -l) files ($(echo "$hidden" |
    xargs -n1 basename | sed 's/\.so.*//' | sort -u | tr '\n' ' '))"
  # The hiding works: Debian's Gloo no longer loads by its name.
  if "$PY" -c 'import ctypes; ctypes.CDLL("libgloo.so.0")' 2>/dev/null; then
    echo "wheel-env: libgloo.so.0 still loads: the hiding failed" >&2; exit 1
  fi
  local deps
  deps=$(ldd "$extension")
  if grep -q 'not found' <<<"$deps"; then echo "$deps" >&2; echo "wheel-env: unresolved" >&2; exit 1; fi
  # By name: no framework, no CUDA library; Gloo and the rest only as the wheel's own copies.
  if awk '{print $1, $3}' <<<"$deps" | grep -E '^lib(torch|tensorflow|jax|python|cudart|nccl|cuda)|^lib(gloo|hiredis|ibverbs|nl|crypto).* /(usr/)?lib'; then
    echo "wheel-env: the extension links one of the above" >&2; exit 1
  fi
  echo "wheel-env: ldd: $(grep -c '=>' <<<"$deps") libraries, all resolved," \
    "$(grep -c 'cerar.libs' <<<"$deps") from the wheel's cerar.libs"
  # numpy alone: under the hidden CUDA no NCCL loads, and saying so names the install.
  local pth=${torch_pth:-/nonexistent}
  [ -e "$pth" ] && mv "$pth" "$pth.off"
  ranks none
  [ -e "$pth.off" ] || return 0
  # With torch: NCCL loads from torch's nvidia package only.
  mv "$pth.off" "$pth"
  ranks "$nccl_expect"
}
export -f check_hidden ranks
export PY root hidden extension venv here nccl_expect torch_pth
t=$SECONDS
unshare --mount --propagation private bash -c 'set -euo pipefail; check_hidden'
echo "wheel-env: hidden-libraries check passed in $((SECONDS - t)) s"

# The CUDA libraries present (nvcc's toolkit on this machine) but no GPU: NCCL loads, CPU sums.
t=$SECONDS
ranks "$nccl_expect"
echo "wheel-env: CUDA-present check passed in $((SECONDS - t)) s"
