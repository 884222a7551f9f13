#!/usr/bin/env bash
# The host time the interposer adds to cuBLASLt GEMMs, side by side in one process per run
# (`tunedblas-bench overhead`: the library's own symbols against the ones a linked host
# resolves), for each shape, three runs: no preload (the control: the same functions twice),
# the preload with no profile (every call a repeated miss), and the preload with a profile
# whose row for the shape names the caller's own algorithm (the heuristic's first answer),
# so the served call runs the very kernel the library's does and only host work differs.
# Each run reports cublasLtMatmul alone and the whole F.linear sequence (a descriptor made,
# two attributes set, three layouts made, the matmul, four destroyed).
#
#   bench/lt/overhead.sh BIN_DIR OUT_DIR [N,M,K ...]
#
# BIN_DIR holds release builds of tunedblas-bench and libtunedblas.so (nothing is built here).
# cuBLASLt and the CUDA runtime: $TUNEDBLAS_CUBLASLT and $TUNEDBLAS_CUDART, else the ones of
# PyTorch's CUDA wheel (site-packages/nvidia/*/lib). OUT_DIR/summary.txt gets every line,
# OUT_DIR/*.json the command's logs. Default shapes: 512,256,2560 (docs/benchmarks/history.md's earlier
# H200 run) and 2560,1,1536 (decode).
set -u
B=$(cd "$1" && pwd)
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
SHAPES=("$@")
[ ${#SHAPES[@]} -eq 0 ] && SHAPES=(512,256,2560 2560,1,1536)
T=$B/tunedblas-bench
PRE=$B/libtunedblas.so
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
S=$OUT/summary.txt
: >"$S"
say() { echo "$*" | tee -a "$S"; }

if [ -z "${TUNEDBLAS_CUBLASLT:-}" ]; then
  SITE=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  for d in $SITE; do
    f=$(ls "$d"/nvidia/*/lib/libcublasLt.so.* 2>/dev/null | head -1)
    [ -n "$f" ] && { export TUNEDBLAS_CUBLASLT=$f; break; }
  done
fi
[ -z "${TUNEDBLAS_CUBLASLT:-}" ] && { say "no cuBLASLt found: set TUNEDBLAS_CUBLASLT"; exit 1; }
if [ -z "${TUNEDBLAS_CUDART:-}" ]; then
  f=$(ls "$(dirname "$TUNEDBLAS_CUBLASLT")"/libcudart.so.* 2>/dev/null | head -1)
  [ -n "$f" ] && export TUNEDBLAS_CUDART=$f
fi
say "cuBLASLt $TUNEDBLAS_CUBLASLT; CUDA runtime ${TUNEDBLAS_CUDART:-the default}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >>"$S" 2>&1
SHA=$(sha256sum "$TUNEDBLAS_CUBLASLT" | cut -d' ' -f1)
export TUNEDBLAS_CACHE_DIR=$W/cache

for shape in "${SHAPES[@]}"; do
  tag=${shape//,/x}
  say "== $shape: no preload (control)"
  "$T" overhead --shape "$shape" --log "$OUT/$tag-plain.json" >"$W/plain.out" 2>>"$S"
  grep '^overhead' "$W/plain.out" | tee -a "$S"
  ROW=$(grep -o 'as a profile row: .*' "$W/plain.out" | sed 's/^as a profile row: //')
  [ -z "$ROW" ] && { say "no heuristic answer for $shape; skipped"; continue; }
  mkdir -p "$W/p-$tag/served" "$W/none"
  printf '{"profiles": {"served": {"dir": "served", "lib_sha256": "%s"}}}\n' "$SHA" >"$W/p-$tag/profiles.json"
  printf '%s,0.01\n' "$ROW" >"$W/p-$tag/served/tunableop_results0.csv"
  say "== $shape: preload, no profile (repeated misses)"
  env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/none" TUNEDBLAS_MISS_DIR="$W/m-$tag" \
    "$T" overhead --shape "$shape" --log "$OUT/$tag-miss.json" 2>>"$S" | grep '^overhead' | grep -v 'profile row' | tee -a "$S"
  say "== $shape: preload, the row served ($ROW)"
  env LD_PRELOAD="$PRE" TUNEDBLAS_PROFILE_DIR="$W/p-$tag" TUNEDBLAS_MISS_DIR="$W/m2-$tag" \
    TUNEDBLAS_STATS="$OUT/$tag-served-stats.json" \
    "$T" overhead --shape "$shape" --log "$OUT/$tag-served.json" 2>>"$S" | grep '^overhead' | grep -v 'profile row' | tee -a "$S"
  grep -o '"served": [0-9]*\|"default": [0-9]*\|"fallbacks": [0-9]*' "$OUT/$tag-served-stats.json" 2>/dev/null | tr '\n' ' ' | tee -a "$S"
  echo | tee -a "$S"
done
