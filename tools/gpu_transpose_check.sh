#!/usr/bin/env bash
# The tiled transpose (EMBER_TRANSPOSE_COPY), the row copy (EMBER_ROW_COPY) and the
# column kernels on the GPU machine in one call (issues 28, 29), on a build made there
# or carried (tools/pack_gpu_build.sh): the copies' test cases and every convolution,
# column and batch-norm case with both copies on; bench_conv with the transpose off and
# on (EMBER_TRANSPOSE_COPY 0 and 1), alternating processes, per-repetition ratios
# (tools/ab_table.py); bench_conv --memory and --profile with it on (the profile's
# Im2colBackward row is col2im's time a call: the measure for col2im's power-of-two
# shifts where the tree has them, benchmarks/NOTES.md); then the copies' and the column
# kernels' CUDA cases under compute-sanitizer's four tools at once.
# Usage: tools/gpu_transpose_check.sh [BUILD_DIR (default build-gpu)]
#   EMBER_GPU_PREBUILT=FILE       unpack FILE (a tar.xz of BUILD_DIR's binaries) first
#   EMBER_COMPARE_REPS=5          repetitions of each variant
#   EMBER_TRANSPOSE_DEADLINE=240  seconds (from the start) after which no repetition starts
#   EMBER_TRANSPOSE_SANITIZE=0    skip the sanitizer runs
# Logs and tables in $OUT (or ./gpu-logs); with $OUT set, the logs in $OUT/logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/gpu_check_common.sh
. tools/gpu_check_common.sh

cases_core='*conv*,im2col*,unfold*,*batch_norm*,autocast: conv2d*'
cases_cuda='transpose plan*,kernels/transpose*,row copy plan*,kernels/row_copy*,conv_gemm_plan*'
cases_cuda+=',kernels/batch_norm*'
echo "== tests (EMBER_TRANSPOSE_COPY=1 EMBER_ROW_COPY=1)"
EMBER_TRANSPOSE_COPY=1 EMBER_ROW_COPY=1 "$build/tests/ember_tests_core" -tc="$cases_core" \
  >"$out/tests_core.txt" 2>&1 || status=1
tail -3 "$out/tests_core.txt"
EMBER_TRANSPOSE_COPY=1 EMBER_ROW_COPY=1 "$build/tests/ember_tests_cuda" -tc="$cases_cuda" \
  >"$out/tests_cuda.txt" 2>&1 || status=1
tail -3 "$out/tests_cuda.txt"
grep -B2 -A6 'ERROR' "$out/tests_core.txt" "$out/tests_cuda.txt" | head -60

echo "== bench_conv, generic copy (0) and tiled transpose (1), alternating (${EMBER_COMPARE_REPS:-5} each)"
ab_runs "$out/transpose" "${EMBER_TRANSPOSE_DEADLINE:-240}" EMBER_TRANSPOSE_COPY 0 1 \
  "$build/benchmarks/bench_conv" >"$out/transpose.txt"
cat "$out/transpose.txt"

echo "== bench_conv --memory, transpose on"
EMBER_TRANSPOSE_COPY=1 "$build/benchmarks/bench_conv" --memory >"$out/conv_memory.txt" 2>&1 ||
  status=1
tail -4 "$out/conv_memory.txt"

echo "== bench_conv --profile, transpose on"
EMBER_TRANSPOSE_COPY=1 "$build/benchmarks/bench_conv" --profile >"$out/conv_profile.txt" 2>&1 ||
  status=1
sed -n '/^profile:/,$p' "$out/conv_profile.txt" | head -100

if [ "${EMBER_TRANSPOSE_SANITIZE:-1}" != 0 ]; then
  echo "== compute-sanitizer on the copies' and the column kernels' CUDA cases, four tools"
  export EMBER_TRANSPOSE_COPY=1 EMBER_ROW_COPY=1
  sanitize_four "$out/sanitize" "$build/tests/ember_tests_cuda" -tc='kernels/transpose*,kernels/row_copy*'
  sanitize_four "$out/sanitize_cols" "$build/tests/ember_tests_core" \
    -tc='im2col/col2im kernels: equal to the composed columns (CUDA)*,conv2d implicit GEMM: stride 2*'
fi
finish gpu.txt transpose.txt conv_memory.txt conv_profile.txt
