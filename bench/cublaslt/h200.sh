#!/usr/bin/env bash
# The cuBLASLt campaign on an NVIDIA GPU (issue 8; BENCHMARKS.md has the figures):
# record -> tune -> verify -> serve with a real PyTorch process, then side by side.
#
#   bench/cublaslt/h200.sh BIN_DIR OUT_DIR [smoke|full]
#
# BIN_DIR holds release builds of tunedblas, tunedblas-bench and
# libtunedblas.so, the gpu_cublaslt test binary (optional) and bench/cublaslt/workload.py. Needs python3 with a CUDA PyTorch.
# Everything lands in OUT_DIR/results.tgz (updated after each step) and OUT_DIR/summary.txt.
set -u
B=$(cd "$1" && pwd)
OUT=$2
MODE=${3:-full}
mkdir -p "$OUT"
W=${TMPDIR:-/tmp}/tunedblas-gpu
rm -rf "$W"
mkdir -p "$W/out" "$W/none"
R=$W/out
PY=python3
T=$B/tunedblas
TB=$B/tunedblas-bench
PRE=$B/libtunedblas.so
export TORCH_BLAS_PREFER_CUBLASLT=1 PYTHONUNBUFFERED=1 TUNEDBLAS_CACHE_DIR=$W/cache
if [ "$MODE" = smoke ]; then
  ONLY="--only 3"; TRIALS=5; PASSES=3
else
  ONLY=""; TRIALS=15; PASSES=9
fi
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
step() { say "== $(date +%T) $*"; }

step "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader >>"$R/summary.txt" 2>&1
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' >>"$R/summary.txt" 2>&1
H=$(ls /usr/local/cuda/include/cublasLt.h 2>/dev/null | head -1)
[ -n "$H" ] && grep -nE "CUBLASLT_(ALGO_CONFIG_[A-Z_]+|MATMUL_DESC_(COMPUTE_TYPE|SCALE_TYPE|POINTER_MODE|TRANSA|TRANSB|EPILOGUE|BIAS_DATA_TYPE|SM_COUNT_TARGET)|MATRIX_LAYOUT_[A-Z_]+|ALGO_CAP_MIN_ALIGNMENT_A_BYTES|MATMUL_PREF_(MAX_WORKSPACE_BYTES|MIN_ALIGNMENT_A_BYTES)|BATCH_MODE_[A-Z_]+) *=|uint64_t data\[" "$H" >"$R/header-enums.txt"
save

step "record: the workload under the preload, no profile"
run record 300 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/none" TUNEDBLAS_MISS_DIR="$W/misses" \
  TUNEDBLAS_LOG=debug TUNEDBLAS_STATS="$R/record-stats.json" $PY "$B/workload.py" record $ONLY
head -3 "$R/record.err" | tee -a "$R/summary.txt"
LIB=$(grep -o "(/[^)]*libcublasLt[^)]*)" "$R/record.err" | head -1 | tr -d '()')
WS=$(grep -o "caller's workspace [0-9]*" "$R/record.err" | awk '{print $3}' | sort -n | head -1)
say "PyTorch's cuBLASLt: $LIB; smallest caller workspace: ${WS:-unknown} bytes"
[ -z "$LIB" ] && { say "no cuBLASLt seen in the PyTorch process; stopping"; save; exit 1; }
export TUNEDBLAS_CUBLASLT=$LIB
CUDART=$(ls "$(dirname "$LIB")"/libcudart.so* 2>/dev/null | head -1)
[ -n "$CUDART" ] && export TUNEDBLAS_CUDART=$CUDART
WS=${WS:-1048576}
ls "$W/misses" >>"$R/summary.txt"
cat "$W"/misses/*-cublaslt-rank0.csv >"$R/misses.csv" 2>/dev/null

step "harness: env, selftest, GPU tests"
run info 60 "$T" env --lib "$LIB"
cat "$R/info.out" >>"$R/summary.txt"
run selftest 120 "$T" selftest
tail -1 "$R/selftest.out" >>"$R/summary.txt"
if ls "$B"/gpu_cublaslt* >/dev/null 2>&1; then
  run gputests 300 env TUNEDBLAS_BIN="$T" "$(ls "$B"/gpu_cublaslt* | head -1)" --nocapture --test-threads=1
  grep "test result" "$R/gputests.out" >>"$R/summary.txt"
fi

step "tune"
run tune 420 "$T" tune "$W/misses" --profiles "$W/profiles" --name h200-cublaslt \
  --workspace "$WS" --trials "$TRIALS" --json
cp "$R/tune.out" "$R/tune.json"
tail -1 "$R/tune.err" >>"$R/summary.txt"
CSV=$W/profiles/h200-cublaslt/tunableop_results0.csv
cp "$CSV" "$R/profile-results0.csv" 2>/dev/null
cp "$W/profiles/profiles.json" "$R/" 2>/dev/null

step "serve + verify: the workload under the profile"
run total-profile 300 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/profiles" TUNEDBLAS_MISS_DIR="$W/misses-after" \
  TUNEDBLAS_STATS="$R/serve-stats.json" $PY "$B/workload.py" total --label preload-profile --passes "$PASSES" $ONLY
head -1 "$R/total-profile.err" >>"$R/summary.txt"
run verify 30 "$T" verify --stats "$R/serve-stats.json"
cat "$R/verify.out" "$R/verify.err" >>"$R/summary.txt"

step "side by side, in one process: CUDA graphs captured with serving off / on"
run ab 420 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/profiles" TUNEDBLAS_MISS_DIR="$W/misses-ab" \
  TUNEDBLAS_STATS="$R/ab-stats.json" $PY "$B/workload.py" ab --trials "$TRIALS" --profile-csv "$CSV" $ONLY

step "host time per eager call, serving off / on, in one process"
run eager-ab 300 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/profiles" TUNEDBLAS_MISS_DIR="$W/misses-eab" \
  $PY "$B/workload.py" eager-ab --profile-csv "$CSV" $ONLY

step "whole workload: no preload / preload without a profile / with the profile / PyTorch TunableOp"
run total-plain 300 $PY "$B/workload.py" total --label no-preload --passes "$PASSES" $ONLY
run total-noprofile 300 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/none" TUNEDBLAS_MISS_DIR="$W/misses-np" \
  $PY "$B/workload.py" total --label preload-no-profile --passes "$PASSES" $ONLY
mkdir -p "$W/tunableop"
run tunableop-tune 300 env PYTORCH_TUNABLEOP_ENABLED=1 PYTORCH_TUNABLEOP_TUNING=1 \
  PYTORCH_TUNABLEOP_FILENAME="$W/tunableop/tunableop_results%d.csv" $PY "$B/workload.py" record $ONLY
cp "$W/tunableop/tunableop_results0.csv" "$R/pytorch-tunableop-results0.csv" 2>/dev/null
run total-tunableop 300 env PYTORCH_TUNABLEOP_ENABLED=1 PYTORCH_TUNABLEOP_TUNING=0 \
  PYTORCH_TUNABLEOP_FILENAME="$W/tunableop/tunableop_results%d.csv" $PY "$B/workload.py" total --label tunableop-lookup --passes "$PASSES" $ONLY
run total-profile2 300 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/profiles" TUNEDBLAS_MISS_DIR="$W/misses-after2" \
  $PY "$B/workload.py" total --label preload-profile-again --passes "$PASSES" $ONLY
run total-plain2 300 $PY "$B/workload.py" total --label no-preload-again --passes "$PASSES" $ONLY
for f in total-profile total-plain total-noprofile total-tunableop total-profile2 total-plain2; do
  grep "^total" "$R/$f.err" >>"$R/summary.txt"
done

step "false adopts: adopted rows re-measured by the harness in a fresh process"
run recheck 300 "$T" confirm --lib "$LIB" --profiles "$W/profiles" --workspace "$WS" --trials "$TRIALS" --log "$R/recheck.json"
tail -1 "$R/recheck.out" >>"$R/summary.txt"

if [ "$MODE" = full ]; then
  step "further configurations: the prefill shapes of two layers tuned again, with a 60 s search budget each"
  grep -E "tn_(4096_[0-9]+_2560|336_[0-9]+_10240)_" "$R/misses.csv" | grep -vE "tn_[0-9]+_(1|4|16|32)_" >"$W/explore-misses.csv"
  run explore 900 "$T" tune --lib "$LIB" "$W/explore-misses.csv" --profiles "$W/explore" --name explore \
    --workspace "$WS" --trials "$TRIALS" --budget 60 --json
  tail -1 "$R/explore.err" >>"$R/summary.txt"
fi

step "interposer host cost per call on real launches"
SHAPE=$($PY - "$R/tune.json" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    for o in d["outcomes"]:
        if ((o.get("tuned") or {}).get("verdict") or {}).get("decision") == "adopt":
            n, m, k = [int(x) for x in o["shape"].split(",")[1].split("_")[1:4]]
            print(f"{n},{m},{k}"); break
    else:
        print("2560,1,1536")
except Exception:
    print("2560,1,1536")
EOF
)
say "overhead shape (an adopted row if any): $SHAPE"
run overhead-plain 120 "$TB" overhead --shape "$SHAPE" --workspace "$WS" --log "$R/overhead-plain.json"
run overhead-miss 120 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/none" TUNEDBLAS_MISS_DIR="$W/misses-oh" \
  "$TB" overhead --shape "$SHAPE" --workspace "$WS" --log "$R/overhead-miss.json"
run overhead-served 120 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/profiles" TUNEDBLAS_MISS_DIR="$W/misses-oh2" \
  TUNEDBLAS_STATS="$R/overhead-served-stats.json" "$TB" overhead --shape "$SHAPE" --workspace "$WS" --log "$R/overhead-served.json"
for f in overhead-plain overhead-miss overhead-served; do cat "$R/$f.out" >>"$R/summary.txt"; done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader >>"$R/summary.txt" 2>&1
step "done"
save
