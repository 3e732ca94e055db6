#!/usr/bin/env bash
# The dropout work's checks on the GPU machine in one call, on a build made there or
# carried (tools/pack_gpu_build.sh): dropout's and the fused attention's CUDA test
# cases (dropout and masks inside the kernels against the float64 composed path with
# the same masks); bench_gpt's char step with attention dropout composed and fused
# (EMBER_ATTENTION_DROPOUT), alternating, per-repetition ratios (tools/ab_table.py);
# predict_memory against the GPU for the char step with each; then the dropout cases
# under compute-sanitizer's four tools.
# Usage: tools/gpu_dropout_check.sh [BUILD_DIR (default build-gpu)]
#   EMBER_GPU_PREBUILT=FILE    unpack FILE (a tar.xz of BUILD_DIR's binaries) first
#   EMBER_COMPARE_REPS=5       repetitions of each variant
#   EMBER_DROPOUT_SANITIZE=0   skip the sanitizer runs
# Logs and tables in $OUT (or ./gpu-logs); with $OUT set, the logs in $OUT/logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/gpu_check_common.sh
. tools/gpu_check_common.sh

echo "== tests"
cuda_cases='ops/fused_attention*,kernels/attention*'
"$build/tests/ember_tests_cuda" -tc="$cuda_cases" >"$out/tests_cuda.txt" 2>&1 || status=1
tail -3 "$out/tests_cuda.txt"
"$build/tests/ember_tests_core" -tc='*dropout*,meta/attention*,attention/*,op_table*' \
  >"$out/tests_core.txt" 2>&1 || status=1
tail -3 "$out/tests_core.txt"
"$build/tests/ember_tests_nn" -tc='*ropout*,*attention*' >"$out/tests_nn.txt" 2>&1 || status=1
tail -3 "$out/tests_nn.txt"

echo "== bench_gpt char, attention dropout composed and fused, alternating (${EMBER_COMPARE_REPS:-5} each)"
mkdir -p "$out/dropout"
for r in $(seq "${EMBER_COMPARE_REPS:-5}"); do
  for mode in composed fused; do
    EMBER_ATTENTION_DROPOUT=$mode "$build/benchmarks/bench_gpt" --only char \
      --json "$out/dropout/$mode.$r.json" >"$out/dropout/$mode.$r.log" 2>&1 || status=1
  done
done
grep -h 'validate\|VALID\|could not be captured' "$out"/dropout/*.1.log
python3 tools/ab_table.py "$out/dropout" composed fused | tee "$out/dropout.txt" || status=1

echo "== bench_gpt --memory --only char (predict_memory against the GPU)"
for mode in composed fused; do
  EMBER_ATTENTION_DROPOUT=$mode "$build/benchmarks/bench_gpt" --memory --only char \
    >"$out/memory_$mode.txt" 2>&1 || status=1
  echo "$mode: $(grep '^memory' "$out/memory_$mode.txt")"
done

if [ "${EMBER_DROPOUT_SANITIZE:-1}" != 0 ]; then
  echo "== compute-sanitizer on the dropout cases"
  for tool in memcheck racecheck initcheck synccheck; do
    {
      under_sanitizer "$tool" "$build/tests/ember_tests_cuda" -tc='*dropout*,*masks read*'
      under_sanitizer "$tool" "$build/tests/ember_tests_core" -ts=cuda -tc='*dropout*'
    } >"$out/sanitize_$tool.txt" 2>&1
    sanitizer_summary "$tool" $? "$out/sanitize_$tool.txt"
  done
fi
finish gpu.txt dropout.txt
