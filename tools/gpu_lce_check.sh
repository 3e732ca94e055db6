#!/usr/bin/env bash
# linear_cross_entropy's checks on the GPU machine in one call (issue 28), on a build made
# there or carried (tools/pack_gpu_build.sh): the cross-entropy CUDA cases (the chunks
# against the CPU float64 path, float32 and bf16 autocast) and the op table's CUDA
# comparisons; bench_gpt's GPT-2 step, eager, with the head and loss chunked and composed
# (EMBER_LINEAR_CROSS_ENTROPY), alternating processes, per-repetition ratios
# (tools/ab_table.py) and each process's predicted and measured peaks; then the
# cross-entropy cases under compute-sanitizer's four tools, run at once.
# Usage: tools/gpu_lce_check.sh [BUILD_DIR (default build-gpu)]
#   EMBER_GPU_PREBUILT=FILE    unpack FILE (a tar.xz of BUILD_DIR's binaries) first
#   EMBER_COMPARE_REPS=5       repetitions of each variant
#   EMBER_LCE_DEADLINE=420     seconds (from the start) after which no repetition starts
#   EMBER_LCE_SANITIZE=0       skip the sanitizer runs
# Logs and tables in $OUT (or ./gpu-logs); with $OUT set, the logs in $OUT/logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/gpu_check_common.sh
. tools/gpu_check_common.sh

echo "== tests"
"$build/tests/ember_tests_cuda" -tc='kernels/cross_entropy*,kernels/linear: the weight gradient summed*' >"$out/tests_cuda.txt" 2>&1 || status=1
tail -3 "$out/tests_cuda.txt"
"$build/tests/ember_tests_core" -tc='*linear_cross_entropy*,*binary_cross_entropy*,op_table*' \
  >"$out/tests_core.txt" 2>&1 || status=1
tail -3 "$out/tests_core.txt"

echo "== bench_gpt --only gpt2 --eager, head chunked and composed, alternating (${EMBER_COMPARE_REPS:-5} each)"
ab_runs "$out/lce" "${EMBER_LCE_DEADLINE:-420}" EMBER_LINEAR_CROSS_ENTROPY composed chunked \
  "$build/benchmarks/bench_gpt" --only gpt2 --eager >"$out/lce.txt"
cat "$out/lce.txt"

if [ "${EMBER_LCE_SANITIZE:-1}" != 0 ]; then
  echo "== compute-sanitizer on the cross-entropy cases, the four tools at once"
  sanitize_four "$out/sanitize" "$build/tests/ember_tests_cuda" \
    -tc='kernels/cross_entropy*,kernels/linear: the weight gradient summed*'
fi
finish gpu.txt lce.txt
