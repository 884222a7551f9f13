# Helpers of the GPU campaign scripts (bench/cublaslt/*.sh), sourced by them: every step's
# output kept under $R, one summary, and an archive refreshed after each step so that a run
# cut short (a device lease ending) still leaves everything it got. Set before sourcing:
# OUT (where results.tgz and summary.txt land), W (the work folder), R ($W/out).

# OUT/results.tgz and OUT/summary.txt, as they are now.
save() { tar czf "$OUT/results.tgz" -C "$W" out 2>/dev/null; cp "$R/summary.txt" "$OUT/summary.txt" 2>/dev/null; }
say() { echo "$*" | tee -a "$R/summary.txt"; }
# run LABEL TIMEOUT CMD...: stdout to $R/LABEL.out, stderr to $R/LABEL.err; the exit status
# and seconds taken said, then saved.
run() {
  local label=$1 t=$2; shift 2
  local t0=$SECONDS
  timeout "$t" "$@" >"$R/$label.out" 2>"$R/$label.err"
  local rc=$?
  say "== $(date +%T) $label: exit $rc, $((SECONDS - t0)) s"
  save
  return $rc
}
# TUNEDBLAS_CUBLASLT and TUNEDBLAS_CUDART, unless set: the newest of python3's CUDA wheels
# (site-packages/nvidia/*/lib), the runtime beside cuBLASLt where it is there.
find_cublaslt() {
  [ -n "${TUNEDBLAS_CUBLASLT:-}" ] && return
  local sp d
  sp=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  TUNEDBLAS_CUBLASLT=$(find $sp -name 'libcublasLt.so.1[23]' 2>/dev/null | sort -r | head -1)
  d=$(dirname "$TUNEDBLAS_CUBLASLT")
  TUNEDBLAS_CUDART=$(ls "$d"/libcudart.so.1[23] 2>/dev/null | head -1)
  [ -z "$TUNEDBLAS_CUDART" ] && TUNEDBLAS_CUDART=$(find $sp -name 'libcudart.so.1[23]' 2>/dev/null | sort -r | head -1)
  export TUNEDBLAS_CUBLASLT TUNEDBLAS_CUDART
}
