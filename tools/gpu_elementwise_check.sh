#!/usr/bin/env bash
# The element-wise changes' checks on the GPU machine in one call (issue 28), on a build
# made there or carried (tools/pack_gpu_build.sh): every CUDA test case once more with
# the vector kernels on (EMBER_ELEMENTWISE_VECTORS=1; the default run has them off), the
# vector and mixed-dtype cases under compute-sanitizer's four tools at once; then
# bench_elementwise (strided and vector kernels alternating in-process) and its PyTorch
# peer as alternating processes; then bench_gpt's GPT-2 step, eager, with the vector
# kernels off and on as alternating processes (tools/ab_table.py).
# Usage: tools/gpu_elementwise_check.sh [BUILD_DIR (default build-gpu)]
#   EMBER_GPU_PREBUILT=FILE    unpack FILE (a tar.xz of BUILD_DIR's binaries) first
#   EMBER_COMPARE_REPS=5       repetitions of each process
#   EMBER_EW_DEADLINE=480      seconds (from the start) after which no repetition starts
# Logs and tables in $OUT (or ./gpu-logs); with $OUT set, the logs in $OUT/logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/gpu_check_common.sh
. tools/gpu_check_common.sh
reps=${EMBER_COMPARE_REPS:-5}
late() { [ $(( $(date +%s) - t0 )) -ge "${EMBER_EW_DEADLINE:-480}" ]; }

echo "== every CUDA case with the vector kernels on"
EMBER_ELEMENTWISE_VECTORS=1 "$build/tests/ember_tests_cuda" >"$out/tests_cuda_vectors.txt" 2>&1 ||
  status=1
tail -3 "$out/tests_cuda_vectors.txt"

echo "== compute-sanitizer on this round's CUDA cases (vectors, lce sums, layer-norm fold, head split), the four tools at once"
cases='kernels/elementwise*,kernels/linear: the weight gradient summed*,kernels/layer_norm: d_x folded*,ops/fused_attention: a GPT*'
sanitize_four "$out/sanitize" "$build/tests/ember_tests_cuda" -tc="$cases"

echo "== bench_elementwise and PyTorch, alternating processes ($reps each)"
mkdir -p "$out/ew"
for r in $(seq "$reps"); do
  late && { echo "deadline: stopped before repetition $r"; break; }
  mkdir -p "$out/ew/rep-$r"
  "$build/benchmarks/bench_elementwise" --reps 3 --json "$out/ew/rep-$r/elementwise.json" \
    >"$out/ew/rep-$r/elementwise.txt" 2>&1 || status=1
  python3 benchmarks/peer_pytorch.py --only elementwise --json "$out/ew/rep-$r/peer_elementwise.json" \
    >"$out/ew/rep-$r/peer_elementwise.txt" 2>&1 || status=1
done
grep -h 'VALIDATION FAILED' "$out"/ew/rep-*/*.txt
python3 benchmarks/results_table.py "$out/ew" | tee "$out/elementwise.txt"

echo "== bench_gpt --only gpt2 --eager, vector kernels off and on, alternating ($reps each)"
ab_runs "$out/gpt" "${EMBER_EW_DEADLINE:-480}" EMBER_ELEMENTWISE_VECTORS 0 1 \
  "$build/benchmarks/bench_gpt" --only gpt2 --eager >"$out/gpt.txt"
cat "$out/gpt.txt"
finish gpu.txt elementwise.txt gpt.txt
