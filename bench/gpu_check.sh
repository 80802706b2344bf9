#!/usr/bin/env bash
# GPU check, one script: builds the GPU pieces alone (no Gloo, Boost or GoogleTest needed),
# runs the GPU tests (kernels vs the CPU codec bit for bit, batched copy, device executor vs
# host executor over staged transports, 1-rank NCCL round trip and watchdog), then the codec
# bandwidth benchmark. Writes logs and a markdown summary to $OUT (default build-gpu-check/out).
# Exit status: 0 all passed; 77 no CUDA device (device tests skipped); 1 a failure.
# Environment: OUT, CUDA_ARCH (default 90), NCCL_ROOT, CERAR_PEAK_GBPS (overrides the peak).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${root}/build-gpu-check"
out="${OUT:-${build}/out}"
mkdir -p "${out}"
summary="${out}/summary.md"
export PATH="${PATH}:/usr/local/cuda/bin"
start=$(date +%s)

log() { echo "$*" | tee -a "${summary}"; }
: > "${summary}"
log "# cerar GPU check ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
log ""

# NCCL: the toolkit's, else pip's nvidia-nccl (torch's dependency) under site-packages.
if [[ -z "${NCCL_ROOT:-}" ]] && ! ls /usr/local/cuda/include/nccl.h >/dev/null 2>&1; then
  NCCL_ROOT="$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)"
fi
if [[ -n "${NCCL_ROOT:-}" ]]; then
  export LD_LIBRARY_PATH="${NCCL_ROOT}/lib:${LD_LIBRARY_PATH:-}"
  log "- NCCL from ${NCCL_ROOT}"
fi
command -v nvidia-smi >/dev/null && nvidia-smi > "${out}/nvidia-smi.txt" 2>&1
log "- nvcc: $(nvcc --version 2>/dev/null | tail -1)"
log "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo none)"

# Build (sm_90 for the H200).
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if ! timeout 240 cmake -S "${root}/tests/gpu/standalone" -B "${build}" "${generator[@]}" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
      ${NCCL_ROOT:+-DNCCL_ROOT="${NCCL_ROOT}"} > "${out}/configure.log" 2>&1 ||
   ! timeout 240 cmake --build "${build}" -j "$(nproc)" > "${out}/build.log" 2>&1; then
  log "- build: **FAILED** (see configure.log / build.log)"
  tail -30 "${out}/configure.log" "${out}/build.log" 2>/dev/null
  exit 1
fi
log "- build: ok in $(( $(date +%s) - start )) s; $(grep -o 'NCCL O[NF]*' "${out}/configure.log" | head -1)"

# Tests.
timeout 180 "${build}/cerar_gpu_check" > "${out}/gpu_check.log" 2>&1
check=$?
log "- tests: $(tail -2 "${out}/gpu_check.log" | tr '\n' ' ') (exit ${check})"
if [[ ${check} -ne 0 && ${check} -ne 77 ]]; then
  grep -B3 -A8 'Failure\|FAILED' "${out}/gpu_check.log" | head -60
fi
grep -E '^\[ +(OK|SKIPPED|FAILED) +\]' "${out}/gpu_check.log" | sed 's/^/    /' | tee -a "${summary}"

# Benchmark (only with a device).
if [[ ${check} -ne 77 ]]; then
  timeout 90 "${build}/cerar_codec_bench" ${CERAR_PEAK_GBPS:-} > "${out}/codec_bench.md" 2>&1
  bench=$?
  log ""
  log "## Codec bandwidth (exit ${bench})"
  cat "${out}/codec_bench.md" | tee -a "${summary}"
fi

log ""
log "total $(( $(date +%s) - start )) s"
case ${check} in
  0) exit 0 ;;
  77) echo "no CUDA device: device tests skipped"; exit 77 ;;
  *) exit 1 ;;
esac
