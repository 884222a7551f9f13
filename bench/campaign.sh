#!/usr/bin/env bash
# Campaign cost on refblas: the demo workload's 70 recorded shapes tuned into a fresh store
# with pruning (default 1.5x) and without (--prune 1e9: every offered solution timed in
# full), alternating, ROUNDS times each. Prints seconds per shape and the campaign's own
# estimate of what pruning saved. Run after: cargo build --release --workspace
# usage: bench/campaign.sh   (ROUNDS=3 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
T=$PWD/target/release
ROUNDS=${ROUNDS:-3}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# Record the shapes once: the demo leaves its miss logs and its library copy in $W/demo.
"$T/tunedblas" demo --dir "$W/demo" --passes 1 >/dev/null
LIB="$W/demo/lib/librocblas.so.5"
run() { # label, extra args...
  local label=$1; shift
  rm -rf "$W/store"
  "$T/tunedblas" tune --lib "$LIB" --profiles "$W/store" "$W/demo/misses" --json "$@" 2>/dev/null |
    python3 -c "import json,sys; s=json.load(sys.stdin); n=s['counts']['shapes']; print(f\"$label {s['seconds']:.2f} s for {n} shapes = {s['seconds']/n:.3f} s/shape; pruning saved (estimate) {s['pruning_saved_s']:.2f} s; adopted {s['counts']['new']}\")"
}
for r in $(seq "$ROUNDS"); do
  run "round $r pruned  " --rotate-mib 64
  run "round $r unpruned" --rotate-mib 64 --prune 1e9
done
