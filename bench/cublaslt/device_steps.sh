#!/usr/bin/env bash
# The GPU steps of issues 25 and 29, as run on 2026-12-05 (BENCHMARKS.md, "On
# an NVIDIA GPU"), into one results folder (OUT/results.tgz and OUT/summary.txt, refreshed
# after every step):
#
#   bench/cublaslt/device_steps.sh BIN OUT STEP...
#
# BIN holds release builds of tunedblas, tunedblas-bench and libtunedblas.so, model.py (for
# model.sh), and BIN/before
# another preload (and tunedblas-bench) to compare with. STEPs, in the order given:
# overhead (bench/lt/overhead.sh with BIN's preload and with BIN/before's), tune-C (the seed's
# 56 shapes tuned into the fresh profile C at the engine's defaults but a 2.5 s screening
# budget; LIM seconds at most, default 420: run it again to resume), confirm-C (C's rows
# re-measured in a third process), ab-C (workload.py total-ab served from C), doctor, model
# (model.sh, one round; MBUDGET, MLIM). cuBLASLt and the CUDA runtime: PyTorch's wheel's,
# unless TUNEDBLAS_CUBLASLT / TUNEDBLAS_CUDART say.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
B=$(cd "$1" && pwd)
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
W=${TMPDIR:-/tmp}/tunedblas-steps
R=$W/out
mkdir -p "$R"
. "$HERE/../lib.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 TORCH_BLAS_PREFER_CUBLASLT=1
find_cublaslt
T=$B/tunedblas
LT=(--lib "$TUNEDBLAS_CUBLASLT" --cudart "$TUNEDBLAS_CUDART")
if [ ! -f "$R/gpu.txt" ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$R/gpu.txt" 2>&1
  python3 -c 'import torch,transformers;print(torch.__version__,transformers.__version__)' >>"$R/gpu.txt" 2>&1
  echo "cuBLASLt $TUNEDBLAS_CUBLASLT ($(sha256sum "$TUNEDBLAS_CUBLASLT" | cut -c1-16)); cudart $TUNEDBLAS_CUDART" >>"$R/gpu.txt"
fi
cat "$R/gpu.txt"
S=""
for nk in 10240,320 4096,2560 2560,1536 3584,2560 512,2560 10240,2560 336,10240; do
  for m in 1 4 16 32 256 512 1024 2048; do S="$S --shape ${nk%,*},$m,${nk#*,}"; done
done
for step in "$@"; do
  t0=$SECONDS
  case $step in
  overhead)
    for p in after:"$B" before:"$B/before"; do
      timeout 100 bash "$HERE/../lt/overhead.sh" "${p#*:}" "$R/ov-${p%%:*}" >/dev/null 2>&1
      grep -h "^overhead\|^==" "$R/ov-${p%%:*}/summary.txt" | sed "s/^/${p%%:*} /" >>"$R/summary.txt"
    done ;;
  tune-*)
    c=${step#tune-}
    run "tune-$c" "${LIM:-420}" "$T" tune "${LT[@]}" $S --profiles "$W/p-$c" --name "$c" --budget 2.5 --json
    tail -3 "$R/tune-$c.err" >>"$R/summary.txt" ;;
  confirm-*)
    c=${step#confirm-}
    run "confirm-$c" 150 "$T" confirm "${LT[@]}" --profiles "$W/p-$c" --log "$R/confirm-$c.json"
    tail -1 "$R/confirm-$c.out" >>"$R/summary.txt"
    mkdir -p "$R/profiles" && cp -r "$W/p-$c" "$R/profiles/$c" ;;
  ab-*)
    c=${step#ab-}
    run "total-ab-$c" 100 env LD_PRELOAD="$B/libtunedblas.so" TUNEDBLAS_PROFILE_DIR="$W/p-$c" \
      TUNEDBLAS_MISS_DIR="$W/m-$c" TUNEDBLAS_STATS="$R/ab-$c-stats.json" python3 "$HERE/workload.py" total-ab --trials 21
    grep "^total-ab" "$R/total-ab-$c.err" >>"$R/summary.txt" ;;
  doctor)
    rm -rf "$W/doctor"
    run doctor 240 "$T" doctor --out "$W/doctor"
    tail -14 "$R/doctor.out" >>"$R/summary.txt"
    cp "$W/doctor/doctor-bundle.tar.gz" "$OUT/" 2>/dev/null ;;
  model)
    BUDGET=${MBUDGET:-5} timeout "${MLIM:-500}" bash "$HERE/model.sh" "$B" "$OUT/model" 1 >/dev/null 2>&1
    say "model: exit $?" ;;
  *) say "unknown step $step" ;;
  esac
  say "== $step $((SECONDS - t0)) s"
  save
done
cat "$R/summary.txt"
