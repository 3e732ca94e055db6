#!/usr/bin/env bash
# Builds tools/gemm_probe with nvcc alone (no CMake: each translation unit in
# parallel, -O3, sm_90a) and runs it: every GEMM kernel of ember against
# cuBLASLt and a float64 host reference, with timings (tools/gemm_probe.cu).
#
#   bash tools/gemm_probe.sh [group ...]    (groups: gemm_probe --list; default all)
#   bash tools/gemm_probe.sh --build-only   (build, write the summaries, run nothing)
#
# Writes under $OUT (default ./probe-out): probe.log (everything), build.log
# (nvcc, with ptxas -v: registers, stack, spills), sass_summary.txt (the matrix
# and barrier instructions each kernel holds), gemm_probe (the binary).
# Exit status: non-zero when a build step or any check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/probe-out}
mkdir -p "$OUT"
NVCC=${NVCC:-nvcc}
FLAGS=(-std=c++20 -O3 -I. --expt-relaxed-constexpr -Xcompiler=-Wall
       "-gencode=arch=compute_90a,code=sm_90a" -DEMBER_GEMM_WATCHDOG=1 -Xptxas=-v)
OBJ="$OUT/obj"
mkdir -p "$OBJ"
SOURCES=(cuda/kernels/sm90/gemm_bf16_kk.cu cuda/kernels/sm90/gemm_bf16_kn.cu
         cuda/kernels/sm90/gemm_bf16_mn.cu cuda/kernels/sm90/gemm_tf32_kk.cu
         cuda/kernels/gemm_sm90.cu cuda/kernels/gemm.cu cuda/tensor_map.cpp cuda/check.cpp
         cuda/gemm_rule.cpp
         core/base/error.cpp tools/gemm_probe.cu)
echo "nvcc: $($NVCC --version | tail -1)"
start=$(date +%s)
: > "$OUT/build.log"
pids=()
for src in "${SOURCES[@]}"; do
  obj="$OBJ/$(echo "$src" | tr '/' '_').o"
  if [[ $src == *.cpp ]]; then
    ( $NVCC -x cu "${FLAGS[@]}" -c "$src" -o "$obj" > "$OBJ/$(basename "$src").log" 2>&1 ) &
  else
    ( $NVCC "${FLAGS[@]}" -c "$src" -o "$obj" > "$OBJ/$(basename "$src").log" 2>&1 ) &
  fi
  pids+=($!)
done
fail=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "BUILD FAILED: ${SOURCES[$i]}"
    fail=1
  fi
  log="$OBJ/$(basename "${SOURCES[$i]}").log"
  { echo "### ${SOURCES[$i]}"; cat "$log"; } >> "$OUT/build.log"
done
if [[ $fail != 0 ]]; then
  grep -B2 -A8 -E "error" "$OUT/build.log" | head -80
  exit 2
fi
$NVCC "${FLAGS[@]}" "$OBJ"/*.o -lcublasLt -lcublas -o "$OUT/gemm_probe" >> "$OUT/build.log" 2>&1 || {
  echo "LINK FAILED"; tail -30 "$OUT/build.log"; exit 2; }
echo "build: $(( $(date +%s) - start )) s"
# What ptxas said about each kernel: registers, stack frame, spills, warnings.
grep -E "Compiling entry|registers|stack frame|C75[0-9][0-9]" "$OUT/build.log" \
  | sed -E 's/_ZN5ember4cuda4sm9016sm90_gemm_kernelINS1_6ConfigI/kernel</' | grep -v "^$" \
  > "$OUT/ptxas_summary.txt" || true
grep -E "C75[0-9][0-9]|spill stores, [1-9]|[1-9][0-9]* bytes stack frame" "$OUT/ptxas_summary.txt" \
  && echo "(ptxas warnings or local memory above: see $OUT/ptxas_summary.txt)"
if command -v cuobjdump > /dev/null; then
  for o in "$OBJ"/cuda_kernels_sm90_*.o; do
    echo "### $(basename "$o")"
    cuobjdump -sass "$o" | grep -oE "(HGMMA[.0-9A-Zx]*|UTMALDG[.0-9A-Z]*|USETMAXREG[.A-Z]*|LDL|STL|HMMA[.0-9A-Z]*)" \
      | sort | uniq -c
  done > "$OUT/sass_summary.txt" 2>&1
  echo "sass: $(grep -c HGMMA "$OUT/sass_summary.txt") HGMMA kinds, local memory ops: $(grep -cE ' (LDL|STL)$' "$OUT/sass_summary.txt")"
fi
if [[ ${1:-} == --build-only ]]; then
  exit 0
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
"$OUT/gemm_probe" "$@" 2>&1 | tee "$OUT/probe.log"
status=${PIPESTATUS[0]}
echo "probe exit status: $status"
exit "$status"
