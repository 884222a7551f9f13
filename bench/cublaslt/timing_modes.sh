#!/usr/bin/env bash
# The tuner's graph-replay timing against its events timing (issue 15), and each shape's
# time against the limits measured in the same run (copy bandwidth, launch floor).
#
#   bench/cublaslt/timing_modes.sh TUNEDBLAS OUT_DIR
#
# TUNEDBLAS: a release build of the command.
# Needs a CUDA GPU and cuBLASLt (found in python3's site-packages, the nvidia wheels, unless
# TUNEDBLAS_CUBLASLT / TUNEDBLAS_CUDART are set). A handful of the seed's shapes, bf16
# F.linear(out N, tokens M, in K); three campaigns in one go: graph, events, graph again.
set -u
T=$1
OUT=$2
mkdir -p "$OUT"
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
find_cublaslt
S=""
for s in 10240,1,320 336,1,10240 2560,1,1536 4096,1,2560 10240,16,2560 10240,256,2560 336,1024,10240 512,512,2560; do
  S="$S --shape $s"
done
WS=1048576
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  "$T" env --lib "$TUNEDBLAS_CUBLASLT"
} >"$OUT/env.txt" 2>&1
for run in graph events graph2; do
  mode=${run%2}
  rm -rf "$OUT/profiles-$run"
  timeout 240 "$T" tune --lib "$TUNEDBLAS_CUBLASLT" $S --profiles "$OUT/profiles-$run" --name timing \
    --workspace $WS --trials 15 --timing "$mode" --json >"$OUT/tune-$run.json" 2>"$OUT/tune-$run.txt"
  echo "$run: exit $?" >>"$OUT/env.txt"
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader >>"$OUT/env.txt" 2>&1
rm -rf "$OUT"/profiles-*
cat "$OUT/env.txt" "$OUT"/tune-*.txt
