#!/usr/bin/env bash
# Builds tools/attention_probe with nvcc alone (no CMake: the kernel files, the
# error-reporting and runtime sources and the probe, in parallel, -O3, sm_90a) and runs it:
# the fused attention (cuda/kernels/attention.cu) against a naive float32
# reference on the GPU, then timed; then PyTorch's scaled_dot_product_attention on
# the same shapes (tools/attention_peer.py) when python3 has torch.
#
#   bash tools/attention_probe.sh                 (checks, timing, the peer)
#   bash tools/attention_probe.sh --build-only    (build and summarise ptxas, run nothing)
#   bash tools/attention_probe.sh --sanitize      (two small shapes under compute-sanitizer:
#                                                  memcheck, racecheck, initcheck, synccheck)
#   bash tools/attention_probe.sh --all           (checks, timing, the peer, then the sanitizers)
#   bash tools/attention_probe.sh --check-only | --time-only   (passed to the probe)
#   bash tools/attention_probe.sh --fwd-only    (checks, then the sm_90 forwards 2 and 4
#                                                alternating, and the default forward with
#                                                backward 2 or 3 alternating; no peer)
#   PROBE_PREBUILT=1 ...   run the binary already under $OUT (no build)
#   PROBE_BWD4=1 ...       check and time backward version 4 (the atomic dQ) too
#   PROBE_SKIP_FWD=1 ...   --fwd-only without the forward versions' timings (the backwards')
#
# Writes under $OUT (default ./probe-out): build.log (nvcc with ptxas -v),
# ptxas_summary.txt (registers, stack, spills per kernel), sass_summary.txt (the
# matrix instructions in the kernels), probe.log, peer.log, attention_probe (the binary).
# Exit status: non-zero when the build or any check failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/probe-out}
mkdir -p "$OUT"
NVCC=${NVCC:-nvcc}
FLAGS=(-std=c++20 -O3 -I. --expt-relaxed-constexpr -Xcompiler=-Wall
       "-gencode=arch=compute_90a,code=sm_90a" -Xptxas=-v -lineinfo -Xcompiler=-fPIC)
OBJ="$OUT/obj"
mkdir -p "$OBJ"
SOURCES=(cuda/kernels/attention.cu cuda/kernels/sm90/attention_fwd.cu
         cuda/kernels/sm90/attention_bwd.cu cuda/check.cpp cuda/runtime.cpp cuda/device_error.cpp
         cuda/tensor_map.cpp core/base/error.cpp tools/attention_probe.cu tools/attention_capi.cu)
if [[ ${PROBE_PREBUILT:-0} == 1 && -x $OUT/attention_probe ]]; then
  echo "attention_probe.sh: PROBE_PREBUILT=1, running $OUT/attention_probe as built"
else
  echo "nvcc: $($NVCC --version | tail -1)"
  start=$(date +%s)
  : > "$OUT/build.log"
  pids=()
  for src in "${SOURCES[@]}"; do
    obj="$OBJ/$(echo "$src" | tr '/' '_').o"
    lang=()
    [[ $src == *.cpp ]] && lang=(-x cu)
    ( $NVCC "${lang[@]}" "${FLAGS[@]}" -c "$src" -o "$obj" > "$OBJ/$(basename "$src").log" 2>&1 ) &
    pids+=($!)
  done
  fail=0
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      echo "BUILD FAILED: ${SOURCES[$i]}"
      fail=1
    fi
    { echo "### ${SOURCES[$i]}"; cat "$OBJ/$(basename "${SOURCES[$i]}").log"; } >> "$OUT/build.log"
  done
  if [[ $fail != 0 ]]; then
    grep -B2 -A8 -E "error" "$OUT/build.log" | head -80
    exit 2
  fi
  LIB_OBJS=("$OBJ"/cuda_kernels_attention.cu.o "$OBJ"/cuda_kernels_sm90_attention_fwd.cu.o
            "$OBJ"/cuda_kernels_sm90_attention_bwd.cu.o
            "$OBJ"/cuda_check.cpp.o "$OBJ"/cuda_runtime.cpp.o "$OBJ"/cuda_device_error.cpp.o
            "$OBJ"/cuda_tensor_map.cpp.o "$OBJ"/core_base_error.cpp.o)
  $NVCC "${FLAGS[@]}" "${LIB_OBJS[@]}" "$OBJ"/tools_attention_probe.cu.o -lcublas \
    -o "$OUT/attention_probe" >> "$OUT/build.log" 2>&1 || {
    echo "LINK FAILED"; tail -30 "$OUT/build.log"; exit 2; }
  # The same kernels as a shared library for tools/attention_peer.py (ctypes).
  $NVCC "${FLAGS[@]}" -shared "${LIB_OBJS[@]}" "$OBJ"/tools_attention_capi.cu.o -lcublas \
    -o "$OUT/libember_attention_probe.so" >> "$OUT/build.log" 2>&1 || {
    echo "LINK FAILED (shared library)"; tail -30 "$OUT/build.log"; exit 2; }
  echo "build: $(( $(date +%s) - start )) s"
  # What ptxas said about each kernel: registers, stack frame and spills.
  awk '/Compiling entry function/ { match($0, /attn_[a-z_0-9]+kernelI[^ \x27]*/); name = substr($0, RSTART, RLENGTH) }
       /stack frame/ { frame = $0; sub(/^[ \t]*/, "", frame) }
       /Used [0-9]+ registers/ && name != "" { match($0, /Used [0-9]+ registers/); print name ": " substr($0, RSTART, RLENGTH) ", " frame }' \
    "$OUT/build.log" | sed -E 's/EEEvNS1_[0-9]+[A-Za-z]*ParamsE[^:]*//' > "$OUT/ptxas_summary.txt"
  echo "ptxas (kernel<D, ...>: registers, local memory):"; sed 's/^/  /' "$OUT/ptxas_summary.txt"
  # ptxas serializes every wgmma of a kernel that touches an in-flight product's registers.
  serialized=$(grep -cE 'C75[0-9][0-9]' "$OUT/build.log")
  echo "ptxas wgmma serialization warnings (C75xx): $serialized" | tee -a "$OUT/ptxas_summary.txt"
  if command -v cuobjdump > /dev/null; then
    cuobjdump -sass "$OBJ/cuda_kernels_attention.cu.o" "$OBJ/cuda_kernels_sm90_attention_fwd.cu.o" \
        "$OBJ/cuda_kernels_sm90_attention_bwd.cu.o" \
      | grep -oE "(HGMMA[.0-9A-Zx]*|HMMA[.0-9A-Z]*|LDSM[.0-9A-Z]*|LDGSTS[.0-9A-Z]*|LDL|STL|RED[.A-Z0-9]*)" \
      | sort | uniq -c > "$OUT/sass_summary.txt" 2>&1
    echo "sass:"; sed 's/^/  /' "$OUT/sass_summary.txt"
  fi
fi
mode=${1:-}
if [[ $mode == --build-only ]]; then
  exit 0
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
sanitize() {
  CS=${COMPUTE_SANITIZER:-compute-sanitizer}
  local status=0 s tool
  for tool in memcheck racecheck initcheck synccheck; do
    echo "== compute-sanitizer --tool $tool (attention_probe --sanitize)"
    $CS --tool "$tool" --error-exitcode 9 "$OUT/attention_probe" --sanitize > "$OUT/sanitize_$tool.log" 2>&1
    s=$?
    grep -E "ERROR SUMMARY|PASS|FAIL|error" "$OUT/sanitize_$tool.log" | tail -6
    echo "$tool exit status: $s"
    [[ $s != 0 ]] && status=$s
  done
  return "$status"
}
if [[ $mode == --sanitize ]]; then
  sanitize
  exit $?
fi
args=("$@")
[[ $mode == --all ]] && args=()
"$OUT/attention_probe" "${args[@]}" 2>&1 | tee "$OUT/probe.log"
status=${PIPESTATUS[0]}
echo "probe exit status: $status"
if [[ $mode != --check-only && $mode != --fwd-only ]] && python3 -c "import torch" 2>/dev/null; then
  OUT="$OUT" python3 tools/attention_peer.py 2>&1 | tee "$OUT/peer.log"
  peer=${PIPESTATUS[0]}
  echo "peer exit status: $peer"
  [[ $peer != 0 && $status == 0 ]] && status=$peer
fi
if [[ $mode == --all ]]; then
  sanitize || status=$?
fi
echo "== summary (full logs under $OUT)"
grep -E "FAIL|EXCEPTION|CUDA error|ALL PASS|^TIME" "$OUT/probe.log" | cut -c1-220
[[ -f $OUT/peer.log ]] && grep -E "ours/best|FAIL|failed check" "$OUT/peer.log" | cut -c1-220
echo "attention_probe.sh exit status: $status"
exit "$status"
