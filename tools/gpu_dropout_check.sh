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
cd "$(dirname "$0")/.."
build="${1:-build-gpu}"
out="$(realpath -m "${OUT:-gpu-logs}")"
mkdir -p "$out"
if [ -n "${EMBER_GPU_PREBUILT:-}" ]; then
  tar -xJf "$EMBER_GPU_PREBUILT" || { echo "cannot unpack $EMBER_GPU_PREBUILT"; exit 1; }
  echo "unpacked $EMBER_GPU_PREBUILT: $(cat "$build/ember_commit.txt" 2>/dev/null || echo '?')"
fi
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

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
    env=()
    [ "$tool" = initcheck ] && env=(EMBER_SANITIZE_PREFILL_BLAS_OUTPUTS=1)
    {
      env "${env[@]}" compute-sanitizer --tool "$tool" --error-exitcode 1 \
        "$build/tests/ember_tests_cuda" -tc='*dropout*,*masks read*'
      env "${env[@]}" compute-sanitizer --tool "$tool" --error-exitcode 1 \
        "$build/tests/ember_tests_core" -ts=cuda -tc='*dropout*'
    } >"$out/sanitize_$tool.txt" 2>&1
    rc=$?
    echo "$tool: exit $rc; $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$out/sanitize_$tool.txt" | tr '\n' ' ')" \
         "$(grep -E 'test cases:' "$out/sanitize_$tool.txt" | tr '\n' ' ')"
    [ $rc -eq 0 ] || status=1
  done
fi
# Under the device tool ($OUT set), every other log goes back in one logs.tgz.
[ -n "${OUT:-}" ] && tools/gpu_logs_pack.sh "$out" gpu.txt dropout.txt
echo "status $status"
exit $status
