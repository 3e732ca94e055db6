#!/usr/bin/env bash
# The implicit-GEMM convolution and the bf16 CNN step's checks on the GPU machine in one
# call (issue 29), on a build made there or carried (tools/pack_gpu_build.sh): the TMA
# probe (tools/tma_box_probe.cu: strided 4-D boxes, zero fill at negative and
# wholly-outside coordinates, the transaction count); the implicit GEMM's test cases (CPU replay of its boxes, the meta device's passes, the
# CUDA cases of suite cuda_sm90 against the CPU in float64) and the conv, batch-norm
# (the bf16 input with float32 parameters among them) and autocast cases, with
# EMBER_CONV_IMPLICIT=1; bench_conv with the columns and with the implicit GEMM
# (EMBER_CONV_IMPLICIT 0 and 1), alternating processes, per-repetition ratios
# (tools/ab_table.py); bench_conv --memory with the implicit GEMM (predict_memory
# against the GPU, TF32 and bf16 ResNet-8); bench_conv --profile with it; then the
# implicit GEMM's and the batch-norm mix's CUDA cases under compute-sanitizer's four
# tools at once.
# Usage: tools/gpu_conv_implicit_check.sh [BUILD_DIR (default build-gpu)]
#   EMBER_GPU_PREBUILT=FILE      unpack FILE (a tar.xz of BUILD_DIR's binaries) first
#   EMBER_COMPARE_REPS=5         repetitions of each variant
#   EMBER_IMPLICIT_DEADLINE=400  seconds (from the start) after which no repetition starts
#   EMBER_IMPLICIT_SANITIZE=0    skip the sanitizer runs
# Logs and tables in $OUT (or ./gpu-logs); with $OUT set, the logs in $OUT/logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/gpu_check_common.sh
. tools/gpu_check_common.sh

echo "== tools/tma_box_probe.cu (the TMA behaviours the implicit GEMM relies on)"
nvcc -std=c++17 -arch=sm_90a -o "$out/tma_box_probe" tools/tma_box_probe.cu -lcuda \
  >"$out/tma_box_probe.txt" 2>&1 && "$out/tma_box_probe" >>"$out/tma_box_probe.txt" 2>&1 || status=1
cat "$out/tma_box_probe.txt"

cases_core='*implicit GEMM*,*bfloat16 input with float32*,autocast: conv2d*,*conv*,*batch_norm*'
cases_core+=',batch_norm_relu*'
cases_cuda='conv_gemm_plan*,kernels/batch_norm*'
echo "== tests (EMBER_CONV_IMPLICIT=1)"
EMBER_CONV_IMPLICIT=1 "$build/tests/ember_tests_core" -tc="$cases_core" >"$out/tests_core.txt" 2>&1 ||
  status=1
tail -3 "$out/tests_core.txt"
EMBER_CONV_IMPLICIT=1 "$build/tests/ember_tests_cuda" -tc="$cases_cuda" >"$out/tests_cuda.txt" 2>&1 ||
  status=1
tail -3 "$out/tests_cuda.txt"
grep -B2 -A6 'ERROR' "$out/tests_core.txt" "$out/tests_cuda.txt" | head -60

echo "== bench_conv, columns (0) and implicit GEMM (1), alternating (${EMBER_COMPARE_REPS:-5} each)"
ab_runs "$out/implicit" "${EMBER_IMPLICIT_DEADLINE:-400}" EMBER_CONV_IMPLICIT 0 1 \
  "$build/benchmarks/bench_conv" >"$out/implicit.txt"
cat "$out/implicit.txt"

echo "== bench_conv --memory, implicit GEMM"
EMBER_CONV_IMPLICIT=1 "$build/benchmarks/bench_conv" --memory >"$out/conv_memory.txt" 2>&1 ||
  status=1
tail -4 "$out/conv_memory.txt"

echo "== bench_conv --profile, implicit GEMM"
EMBER_CONV_IMPLICIT=1 "$build/benchmarks/bench_conv" --profile >"$out/conv_profile.txt" 2>&1 ||
  status=1
sed -n '/^profile:/,$p' "$out/conv_profile.txt" | head -100

if [ "${EMBER_IMPLICIT_SANITIZE:-1}" != 0 ]; then
  echo "== compute-sanitizer on the implicit GEMM's and the batch-norm mix's cases, four tools"
  export EMBER_CONV_IMPLICIT=1
  sanitize_four "$out/sanitize" "$build/tests/ember_tests_core" \
    -tc='conv2d implicit GEMM: output*,conv2d implicit GEMM: stride 2*'
  sanitize_four "$out/sanitize_bn" "$build/tests/ember_tests_cuda" \
    -tc='kernels/batch_norm: a bfloat16 input with float32*,kernels/batch_norm: batch_norm_relu*'
fi
finish gpu.txt tma_box_probe.txt implicit.txt conv_memory.txt conv_profile.txt
