#!/usr/bin/env bash
# Instructions the interposer adds to one PyTorch-style F.linear through an Lt library, on
# its CPU stand-in (no GPU), counted exactly with valgrind's callgrind: the host makes N
# calls of 64,8,64 in a row (each call makes and destroys its descriptor and three layouts,
# sets two attributes, asks the heuristic and runs the matmul: the wrapped descriptor and
# layout calls are counted with the matmul), with N = 1,000 and 11,000; the difference over
# 10,000 is one call, start-up cancelled out. "added" is that minus the same without the
# preload. Paths: a served row (the tuned algorithm), a repeated miss (no row), a
# pass-through (serving switched off with tunedblas_<lib>_serving(0)). The main thread's
# own count (--separate-threads), as scripts/bench does.
#
# With BREAKDOWN=1, each path is followed by the preload's share split by function (its
# self cost per call, code inlined into a function counted in it; the hook's name for the
# thin export that packs a matmul's arguments): where a redesign has to cut.
#
# usage: [BREAKDOWN=1] bench/lt/instructions.sh hipblaslt|cublaslt [PRELOAD.so]
#   (after `cargo build --release -p tunedblas-preload` and one run of the backend's tests,
#   `cargo test --test hipblaslt` / `--test cublaslt`, which build the stand-in and host)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
backend="${1:?usage: bench/lt/instructions.sh hipblaslt|cublaslt [PRELOAD.so]}"
preload="${2:-$here/target/release/libtunedblas.so}"
hosts="$here/target/debug/test-hosts"
newest() { ls -t $1 2>/dev/null | head -n 1; }
# Per backend: the host and module stems, the stand-in library, the row served, its
# validator and the stand-in's trace variable.
case "$backend" in
  hipblaslt) stem=hiplt soname=libhipblaslt.so.1 solution="Gemm_Hipblaslt_42"
    validators="Validator,PT_VERSION,2.7.0" unset_trace=FAKEHIPLT_TRACE ;;
  cublaslt) stem=lt soname=libcublasLt.so.13
    solution="Gemm_Cublaslt_algo21_tile20_stages35_splitk1_red0_swizzle1_custom0_inner0_cluster2"
    validators="Validator,CUBLASLT_VERSION,130100" unset_trace=FAKELT_TRACE ;;
  *) echo "unknown backend $backend"; exit 2 ;;
esac
host="$(newest "$hosts/${stem}_host-*/${stem}_host")"
module="$(newest "$hosts/lib${stem}mod.so-*/lib${stem}mod.so")"
lib="$(newest "$hosts/$soname-*/$soname")"
op="GemmTunableOp_BFloat16_TN,tn_64_8_64_ld_64_64_64"
for f in "$host" "$module" "$lib" "$preload"; do
  [ -f "$f" ] || { echo "missing $f: see usage"; exit 2; }
done
command -v valgrind > /dev/null || { echo "valgrind is not installed"; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sha="$(sha256sum "$lib" | cut -d' ' -f1)"
mkdir -p "$work/served/fake"
printf '{"profiles": {"fake": {"dir": "fake", "lib_sha256": "%s"}}}\n' "$sha" > "$work/served/profiles.json"
printf '%s\n%s,%s,0.01\n' "$validators" "$op" "$solution" > "$work/served/fake/tunableop_results0.csv"

count() { # mode calls -> instructions of the main thread
  local mode="$1" n="$2" out="$work/cg-$1-$2"
  local env=(env -u "$unset_trace" -u TUNEDBLAS_PROFILE -u TUNEDBLAS_LOG
    TUNEDBLAS_MISS_DIR="$work/$mode/m" TUNEDBLAS_CACHE_DIR="$work/cache")
  local args=("$module")
  case "$mode" in
    plain) ;;
    miss) env+=(LD_PRELOAD="$preload" TUNEDBLAS_PROFILE_DIR="$work/none") ;;
    served) env+=(LD_PRELOAD="$preload" TUNEDBLAS_PROFILE_DIR="$work/served") ;;
    pass) env+=(LD_PRELOAD="$preload" TUNEDBLAS_PROFILE_DIR="$work/served"); args+=(off) ;;
  esac
  args+=("@repeat:$n:64,8,64")
  # Each run starts with no hash cache, so both runs of a mode identify the library alike (a
  # cache the shorter run left would spare the longer one the sha256 and lower the count).
  rm -rf "$work/cache"
  "${env[@]}" valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out" \
    "$host" "${args[@]}" > "$work/out-$mode-$n" 2>&1 || { cat "$work/out-$mode-$n"; exit 1; }
  grep -q "repeat-failed=0" "$work/out-$mode-$n" || { cat "$work/out-$mode-$n"; exit 1; }
  grep -E "^(summary|totals):" "$out-01" | head -n 1 | awk '{print $2}'
}
per_call() { # mode -> instructions per call
  local a b
  b="$(count "$1" 1000)"
  a="$(count "$1" 11000)"
  echo $(( (a - b + 5000) / 10000 ))
}
breakdown() { # mode -> the preload's self instructions per call, by function
  echo "$1: instructions per call in libtunedblas.so, by function (self, inlined code included)"
  python3 - "$work/cg-$1-1000-01" "$work/cg-$1-11000-01" <<'PY'
import collections, re, subprocess, sys
def by_function(path):
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--inclusive=no", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    cost = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S+?):(.+?)(?:\s+\[(.*)\])?$", line)
        # (A library function entered through the preload's trampoline of the same name
        # can be filed under libtunedblas.so: it has no source file, "???".)
        if m and m.group(2) != "???" and ("tunedblas::" in m.group(3) or "libtunedblas" in (m.group(4) or "")):
            name = m.group(3).strip().removeprefix("tunedblas::")
            cost[name] += int(m.group(1).replace(",", ""))
    return cost
short, long = by_function(sys.argv[1]), by_function(sys.argv[2])
rows = {k: (long[k] - short.get(k, 0)) / 10000 for k in long}
for k, v in sorted(rows.items(), key=lambda r: -r[1]):
    if v >= 1:
        print(f"  {v:7.0f}  {k}")
print(f"  {sum(rows.values()):7.0f}  (all)")
PY
}
plain="$(per_call plain)"
echo "$backend stand-in, F.linear 64,8,64 (descriptor + 3 layouts made, 2 attributes set, heuristic, matmul, all destroyed); $preload"
echo
echo "| path | instructions per call | added |"
echo "|---|---|---|"
echo "| no preload | $plain | — |"
for mode in served miss pass; do
  n="$(per_call "$mode")"
  case "$mode" in served) name="served row" ;; miss) name="repeat miss" ;; pass) name="pass-through (serving off)" ;; esac
  echo "| $name | $n | $((n - plain)) |"
  [ -n "${BREAKDOWN:-}" ] && breakdown "$mode" >> "$work/breakdown"
done
if [ -n "${BREAKDOWN:-}" ]; then
  echo
  cat "$work/breakdown"
fi
