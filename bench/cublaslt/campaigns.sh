#!/usr/bin/env bash
# Issue 15 on an NVIDIA GPU: the seed's 56-shape bf16 workload tuned twice with the wider
# search and the fresh-process confirmation, each adopted row re-measured in a third process,
# then the profiles served in PyTorch (per-shape graph A/B, whole-workload graph time).
#
#   bench/cublaslt/campaigns.sh BIN OUT smoke|rest|harness|torch [BUDGET]
#
# BIN holds tunedblas, libtunedblas.so and workload.py. smoke: 3 shapes, one campaign;
# harness: campaigns $CAMPAIGNS (a b; fresh profile each; BUDGET seconds of screening per shape,
# tune's default when not given), each followed by `confirm` of its rows (a third process); (diag, the --delay spin/gemm
# diagnosis of BENCHMARKS' history, went with `tunedblas lt tune --delay`: the spin kernel is
# the one delay now); rest: the same heavy shapes with each --rest of $RESTS (0 1 3), process by
# process, two rounds, clock, power and throttle reasons sampled alongside; torch: BIN/profiles/{a,b} (from a harness run)
# served in PyTorch. Everything lands in OUT/results.tgz and OUT/summary.txt.
set -u
B=$(cd "$1" && pwd)
OUT=$2
MODE=$3
BUDGET=${4:-}
mkdir -p "$OUT"
W=${TMPDIR:-/tmp}/tunedblas-campaigns
mkdir -p "$W/out"
R=$W/out
T=$B/tunedblas
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
export PYTHONUNBUFFERED=1 TORCH_BLAS_PREFER_CUBLASLT=1
find_cublaslt
LIB=(--lib "$TUNEDBLAS_CUBLASLT")
clocks() { nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader >>"$R/summary.txt" 2>&1; }
S=""
for nk in 10240,320 4096,2560 2560,1536 3584,2560 512,2560 10240,2560 336,10240; do
  for m in 1 4 16 32 256 512 1024 2048; do
    S="$S --shape ${nk%,*},$m,${nk#*,}"
  done
done
say "== $(date +%T) $MODE, budget ${BUDGET:-the default} s; cuBLASLt $TUNEDBLAS_CUBLASLT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$R/summary.txt" 2>&1
clocks
case "$MODE" in
smoke)
  run info 60 "$T" env "${LIB[@]}"
  cat "$R/info.out" >>"$R/summary.txt"
  run tune-smoke 240 "$T" tune "${LIB[@]}" --shape 512,256,2560 --shape 10240,2048,320 --shape 10240,256,2560 \
    --profiles "$W/profiles" --name smoke ${BUDGET:+--budget "$BUDGET"} --json
  cp "$R/tune-smoke.out" "$R/tune-smoke.json"
  grep -E "search:|fresh process|limits" "$R/tune-smoke.err" >>"$R/summary.txt"
  ;;
rest)
  # The compute-heavy prefill shapes whose spread stayed over 3%, and two decode controls:
  # heuristic and best answer timed with each --rest, alternating processes.
  D="--shape 3584,1024,2560 --shape 3584,2048,2560 --shape 4096,1024,2560 --shape 4096,2048,2560"
  D="$D --shape 10240,512,2560 --shape 10240,2048,2560 --shape 10240,2048,320 --shape 2560,2048,1536"
  D="$D --shape 4096,1,2560 --shape 512,1,2560"
  nvidia-smi -q -d POWER,PERFORMANCE,CLOCK,TEMPERATURE >"$R/smi-q.txt" 2>&1
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader -lms 100 >"$R/clocks-rest.csv" 2>&1 &
  SMI=$!
  for i in 1 2; do
    for r in ${RESTS:-0 1 3}; do
      run "rest-r$r-$i" 200 "$T" tune "${LIB[@]}" $D --profiles "$W/rest-r$r-$i" --name rest --budget 0 \
        --confirm off --rest "$r" --json
      cp "$R/rest-r$r-$i.out" "$R/rest-r$r-$i.json"
      head -1 "$R/rest-r$r-$i.err" >>"$R/summary.txt"
    done
  done
  kill $SMI 2>/dev/null
  ;;
harness)
  # CAMPAIGNS (a b by default): each a fresh tune process into a fresh profile (EXTRA: more
  # tune options, e.g. --workspace 4194304), then its
  # adopted rows re-measured by `confirm`, a third process.
  for c in ${CAMPAIGNS:-a b}; do
    rm -rf "$W/profiles-$c"
    run "tune-$c" 400 "$T" tune "${LIB[@]}" $S --profiles "$W/profiles-$c" --name "$c" ${BUDGET:+--budget "$BUDGET"} ${EXTRA:-} --json
    cp "$R/tune-$c.out" "$R/tune-$c.json"
    tail -4 "$R/tune-$c.err" >>"$R/summary.txt"
    clocks
    mkdir -p "$R/profiles"
    cp -r "$W/profiles-$c" "$R/profiles/$c"
    run "recheck-$c" 120 "$T" confirm "${LIB[@]}" --profiles "$W/profiles-$c" ${EXTRA:-} --log "$R/recheck-$c.json"
    tail -1 "$R/recheck-$c.out" >>"$R/summary.txt"
  done
  ;;
torch)
  # PROFILES (a b by default): each profile served in PyTorch, per shape and whole workload;
  # the first also against no preload, process by process.
  PRE=$B/libtunedblas.so
  set -- ${PROFILES:-a b}
  FIRST=$1
  for c in "$@"; do
    P=$B/profiles/$c
    run "ab-$c" 200 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$P" TUNEDBLAS_MISS_DIR="$W/miss-ab-$c" \
      TUNEDBLAS_STATS="$R/ab-$c-stats.json" python3 "$B/workload.py" ab --trials 15 --profile-csv "$P/$c/tunableop_results0.csv"
    grep -o '"served": *[0-9]*\|"rows_hit": *[0-9]*\|"missed_shapes": *[0-9]*\|"fallbacks": *[0-9]*' "$R/ab-$c-stats.json" | tr '\n' ' ' >>"$R/summary.txt"
    echo >>"$R/summary.txt"
    run "total-ab-$c" 120 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$P" TUNEDBLAS_MISS_DIR="$W/miss-tab-$c" \
      python3 "$B/workload.py" total-ab --trials 21
    tail -1 "$R/total-ab-$c.err" >>"$R/summary.txt"
  done
  for i in 1 2; do
    run "total-profile-$FIRST$i" 120 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$B/profiles/$FIRST" TUNEDBLAS_MISS_DIR="$W/miss-t$i" \
      python3 "$B/workload.py" total --label "profile-$FIRST-$i"
    run "total-plain$i" 120 python3 "$B/workload.py" total --label "no-preload-$i"
  done
  grep -h "^total" "$R"/total-*.err >>"$R/summary.txt"
  clocks
  ;;
esac
say "== $(date +%T) done"
save
