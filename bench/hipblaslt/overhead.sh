#!/usr/bin/env bash
# What the interposer adds to a hipBLASLt caller, on the CPU stand-in (no GPU): wall time of
# `hiplt_host` making N PyTorch-style F.linear calls on one thread (each call makes and
# destroys its descriptor and three layouts, asks the heuristic, runs hipblasLtMatmul), run
# without the preload, with it and no profile (every call a miss: a key read and a count),
# and with a profile whose row serves the shape (key read, lookup, tuned index), the three
# interleaved, 7 rounds; medians per call. The stand-in computes nothing, so the figures are
# the host-side cost of a call, which is what the interposer adds to.
#
# usage: bench/hipblaslt/overhead.sh [CALLS]   (after `cargo build --release -p tunedblas-preload`
#        and `cargo test --test hipblaslt` once, which builds the stand-in and the host)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
calls="${1:-200000}"
preload="$here/target/release/libtunedblas.so"
host="$(ls -t "$here"/target/debug/test-hosts/hiplt_host-*/hiplt_host | head -n 1)"
module="$(ls -t "$here"/target/debug/test-hosts/libhipltmod.so-*/libhipltmod.so | head -n 1)"
lib="$(ls -t "$here"/target/debug/test-hosts/libhipblaslt.so.1-*/libhipblaslt.so.1 | head -n 1)"
[ -f "$preload" ] || { echo "build it first: cargo build --release -p tunedblas-preload"; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sha="$(sha256sum "$lib" | cut -d' ' -f1)"
mkdir -p "$work/served/p/fake"
cat > "$work/served/p/profiles.json" <<JSON
{"profiles": {"fake": {"dir": "fake", "lib_sha256": "$sha"}}}
JSON
cat > "$work/served/p/fake/tunableop_results0.csv" <<CSV
Validator,PT_VERSION,2.7.0
GemmTunableOp_BFloat16_TN,tn_8_8_8_ld_8_8_8,Gemm_Hipblaslt_42,0.01
GemmTunableOp_BFloat16_TN,tn_16_8_8_ld_8_8_16,Gemm_Hipblaslt_42,0.01
CSV
per_call() { # mode -> ns per call
  local mode="$1" start end
  local env=(env -u FAKEHIPLT_TRACE TUNEDBLAS_MISS_DIR="$work/$mode/m" TUNEDBLAS_CACHE_DIR="$work/cache")
  case "$mode" in
    plain) env+=() ;;
    miss) env+=(LD_PRELOAD="$preload" TUNEDBLAS_PROFILE_DIR="$work/none") ;;
    served) env+=(LD_PRELOAD="$preload" TUNEDBLAS_PROFILE_DIR="$work/served/p") ;;
  esac
  start=$(date +%s%N)
  "${env[@]}" "$host" "$module" "@threads:1:$((calls / 2))" > /dev/null 2>&1
  end=$(date +%s%N)
  echo $(( (end - start) / calls ))
}
declare -A runs
for round in 1 2 3 4 5 6 7; do
  for mode in plain miss served; do
    runs[$mode]+="$(per_call "$mode") "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| mode | ns per call (7 rounds, $calls calls each) | median |"
echo "|---|---|---|"
for mode in plain miss served; do
  echo "| $mode | ${runs[$mode]}| **$(echo "${runs[$mode]}" | median)** |"
done
