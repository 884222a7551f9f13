#!/usr/bin/env bash
# Rough per-call cost of libtunedblas.so, whole-process wall clock: N calls of one 4x4x4
# gemm_ex against refblas with REFBLAS_NO_COMPUTE=1, without the preload and under it with a
# served row, a Default row, and no row (repeat miss), interleaved over 5 rounds. Prints
# nanoseconds per call of each round. The proper microbenchmark belongs to the performance
# issue; this one includes the C host's own per-call work, identical in every column.
# usage: bench/interposer_overhead.sh   (after cargo build --release --workspace)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-2000000}
T=$PWD/target/release
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/lib" "$W/served/p" "$W/default/p"
cp "$T/librocblas_v4.so" "$W/lib/librocblas.so.4"
ln -s librocblas.so.4 "$W/lib/librocblas.so"
cc -O2 -o "$W/host" tests/hosts/gemm_host.c -L"$W/lib" -Wl,-rpath,"$W/lib" -lrocblas -lpthread
sha=$(sha256sum "$W/lib/librocblas.so.4" | cut -c1-64)
sol=$("$W/host" --list ex:TN:h:4:4:4 | sed 's/.*solutions=\([^,]*\).*/\1/')
for d in served default; do
  printf '{"profiles":{"p":{"dir":"p","lib_sha256":"%s"}}}\n' "$sha" > "$W/$d/profiles.json"
done
echo "GemmTunableOp_Half_TN,tn_4_4_4_ld_4_4_4,Gemm_Rocblas_$sol,0.1" > "$W/served/p/tunableop_results0.csv"
echo "GemmTunableOp_Half_TN,tn_4_4_4_ld_4_4_4,Default,0.1" > "$W/default/p/tunableop_results0.csv"
run() {
  local label=$1; shift
  local t0 t1
  t0=$(date +%s%N)
  env REFBLAS_NO_COMPUTE=1 TUNEDBLAS_LOG=quiet TUNEDBLAS_CACHE_DIR="$W/cache" TUNEDBLAS_MISS_DIR="$W/miss" "$@" \
    "$W/host" "ex:TN:h:4:4:4:$N" >/dev/null
  t1=$(date +%s%N)
  echo "$label $(( (t1 - t0) / N ))"
}
for _ in 1 2 3 4 5; do
  run plain
  run served LD_PRELOAD="$T/libtunedblas.so" TUNEDBLAS_PROFILE_DIR="$W/served"
  run default LD_PRELOAD="$T/libtunedblas.so" TUNEDBLAS_PROFILE_DIR="$W/default"
  run miss LD_PRELOAD="$T/libtunedblas.so" TUNEDBLAS_PROFILE_DIR="$W/none"
done | awk '{v[$1]=v[$1]" "$2} END {for (k in v) print k ":" v[k]}' | sort
