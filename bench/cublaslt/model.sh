#!/usr/bin/env bash
# A whole model on an NVIDIA GPU (issue 25): transformers running a Llama-3.2-3B-shaped model
# (bench/cublaslt/model.py) is recorded under the preload, its shapes tuned with the engine at
# its defaults, and the model timed process by process, alternating: no preload, the preload
# with the profile (every row hit and no miss is checked from the preload's stats).
#
#   [BUDGET=S] bench/cublaslt/model.sh BIN OUT [ROUNDS]
#
# BIN holds release builds of tunedblas and libtunedblas.so and model.py. Everything lands in
# OUT/results.tgz and OUT/summary.txt.
#
# Run on an H100 on 2026-12-05 with transformers 5.17.0 (BENCHMARKS.md, "On an
# NVIDIA GPU"): the static cache's constructor differs between transformers releases;
# model.py tries both forms.
set -u
B=$(cd "$1" && pwd)
OUT=$2
ROUNDS=${3:-2}
mkdir -p "$OUT"
W=${TMPDIR:-/tmp}/tunedblas-model
rm -rf "$W"
mkdir -p "$W/out" "$W/none"
R=$W/out
T=$B/tunedblas
PRE=$B/libtunedblas.so
export TORCH_BLAS_PREFER_CUBLASLT=1 PYTHONUNBUFFERED=1 TUNEDBLAS_CACHE_DIR=$W/cache
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$R/summary.txt" 2>&1
run record 240 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/none" TUNEDBLAS_MISS_DIR="$W/misses" \
  TUNEDBLAS_LOG=debug python3 "$B/model.py" record
tail -2 "$R/record.err" >>"$R/summary.txt"
WS=$(grep -o "caller's workspace [0-9]*" "$R/record.err" | awk '{print $3}' | sort -n | head -1)
say "shapes recorded: $(cat "$W"/misses/* 2>/dev/null | grep -vc '^#'); smallest caller workspace: ${WS:-unknown}"
run tune 400 "$T" tune "$W/misses" --profiles "$W/profiles" --name model ${WS:+--workspace "$WS"} ${BUDGET:+--budget "$BUDGET"} --json
cp "$R/tune.out" "$R/tune.json"
tail -3 "$R/tune.err" >>"$R/summary.txt"
cp -r "$W/profiles" "$R/profiles" 2>/dev/null
for i in $(seq 1 "$ROUNDS"); do
  run "plain-$i" 200 python3 "$B/model.py" time --label "no-preload-$i"
  run "profile-$i" 200 env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/profiles" TUNEDBLAS_MISS_DIR="$W/miss-$i" \
    TUNEDBLAS_STATS="$R/profile-$i-stats.json" python3 "$B/model.py" time --label "profile-$i"
  grep -o '"served": *[0-9]*\|"rows_hit": *[0-9]*\|"rows": *[0-9]*\|"missed_shapes": *[0-9]*\|"missed": *[0-9]*' \
    "$R/profile-$i-stats.json" 2>/dev/null | tr '\n' ' ' >>"$R/summary.txt"
  echo >>"$R/summary.txt"
done
cat "$R"/plain-*.out "$R"/profile-*.out >>"$R/summary.txt" 2>/dev/null
say "== $(date +%T) done"
save
