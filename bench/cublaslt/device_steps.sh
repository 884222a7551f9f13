#!/usr/bin/env bash
# The GPU steps of issues 25 and 29, as run on 2026-12-05 (BENCHMARKS.md, "The one engine on
# an NVIDIA GPU"), one results folder (/tmp/r, packed into OUT/r.tgz after every step):
#
#   bench/cublaslt/device_steps.sh OUT STEP...
#
# STEPs, in the order given: overhead (bench/lt/overhead.sh with BIN's preload and with
# BIN/before's), tune-C (the seed's 56 shapes tuned into the fresh profile C at the engine's
# defaults but a 2.5 s screening budget; LIM seconds at most, default 420: rerun to resume),
# confirm-C (C's rows re-measured in a third process), ab-C (workload.py total-ab served from
# C), doctor, model (model.sh, one round; MBUDGET, MLIM). The script lies in BIN beside
# release builds of tunedblas, libtunedblas.so and the bench scripts it runs; cuBLASLt and the
# CUDA runtime are PyTorch's wheel's.
set -u
B=$(cd "$(dirname "$0")" && pwd); OUT=$1; shift
R=/tmp/r; mkdir -p $R
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 TORCH_BLAS_PREFER_CUBLASLT=1
SP=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))')
export TUNEDBLAS_CUBLASLT=$(find $SP -name 'libcublasLt.so.1[23]' 2>/dev/null | sort -r | head -1)
export TUNEDBLAS_CUDART=$(ls $(dirname $TUNEDBLAS_CUBLASLT)/libcudart.so.1[23] 2>/dev/null | head -1)
[ -z "$TUNEDBLAS_CUDART" ] && export TUNEDBLAS_CUDART=$(find $SP -name 'libcudart.so.1[23]' 2>/dev/null | sort -r | head -1)
T=$B/tunedblas
save() { tar czf $OUT/r.tgz -C /tmp r 2>/dev/null; }
say() { echo "$*" | tee -a $R/summary.txt; }
if [ ! -f $R/gpu.txt ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >$R/gpu.txt 2>&1
  python3 -c 'import torch,transformers;print(torch.__version__,transformers.__version__)' >>$R/gpu.txt 2>&1
  echo "cuBLASLt $TUNEDBLAS_CUBLASLT ($(sha256sum $TUNEDBLAS_CUBLASLT | cut -c1-16)); cudart $TUNEDBLAS_CUDART" >>$R/gpu.txt
fi
cat $R/gpu.txt
S=""
for nk in 10240,320 4096,2560 2560,1536 3584,2560 512,2560 10240,2560 336,10240; do
  for m in 1 4 16 32 256 512 1024 2048; do S="$S --shape ${nk%,*},$m,${nk#*,}"; done
done
for step in "$@"; do
  t0=$SECONDS
  case $step in
  overhead)
    timeout 100 bash $B/overhead.sh $B $R/ov-after >/dev/null 2>&1
    timeout 100 bash $B/overhead.sh $B/before $R/ov-before >/dev/null 2>&1
    grep -h "^overhead\|^==" $R/ov-after/summary.txt | sed 's/^/after  /' >>$R/summary.txt
    grep -h "^overhead\|^==" $R/ov-before/summary.txt | sed 's/^/before /' >>$R/summary.txt ;;
  tune-*)
    c=${step#tune-}; lim=${LIM:-420}
    timeout $lim $T tune --lib $TUNEDBLAS_CUBLASLT --cudart $TUNEDBLAS_CUDART $S --profiles /tmp/p-$c --name $c --budget 2.5 --json >$R/tune-$c.json 2>>$R/tune-$c.err
    say "tune-$c exit $?"; tail -3 $R/tune-$c.err >>$R/summary.txt ;;
  confirm-*)
    c=${step#confirm-}
    timeout 150 $T confirm --lib $TUNEDBLAS_CUBLASLT --cudart $TUNEDBLAS_CUDART --profiles /tmp/p-$c --log $R/confirm-$c.json >$R/confirm-$c.out 2>&1
    say "confirm-$c exit $?: $(tail -1 $R/confirm-$c.out)"; mkdir -p $R/profiles; cp -r /tmp/p-$c $R/profiles/$c ;;
  ab-*)
    c=${step#ab-}
    env LD_PRELOAD=$B/libtunedblas.so TUNEDBLAS_PROFILE_DIR=/tmp/p-$c TUNEDBLAS_MISS_DIR=/tmp/m-$c TUNEDBLAS_STATS=$R/ab-$c-stats.json \
      timeout 100 python3 $B/workload.py total-ab --trials 21 >$R/total-ab-$c.out 2>$R/total-ab-$c.err
    say "total-ab-$c exit $?: $(tail -1 $R/total-ab-$c.err)" ;;
  doctor)
    rm -rf /tmp/doctor; timeout 240 $T doctor --out /tmp/doctor >$R/doctor.out 2>$R/doctor.err
    say "doctor exit $?"; tail -14 $R/doctor.out >>$R/summary.txt; cp /tmp/doctor/doctor-bundle.tar.gz $OUT/ 2>/dev/null ;;
  model)
    BUDGET=${MBUDGET:-5} timeout ${MLIM:-500} bash $B/model.sh $B $OUT/model 1 >/dev/null 2>&1; say "model exit $?" ;;
  esac
  say "== $step $((SECONDS - t0)) s"; save
done
cat $R/summary.txt
