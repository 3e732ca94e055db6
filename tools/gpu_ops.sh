#!/usr/bin/env bash
# One call on the GPU machine for the classification and sequence ops (issue 14,
# item 1): build with 16 jobs (Release, sm_90), run the test binaries that cover
# them (their CPU and CUDA cases: core, cuda, nn), then bench_cross_entropy and
# bench_layer_norm beside their PyTorch peers, joined into one table. Logs in $OUT
# (or ./gpu-logs).
# Usage: tools/gpu_ops.sh [tests] [bench] [sanitize]   (default: tests bench)
#   sanitize: compute-sanitizer memcheck and racecheck over the new CUDA test cases
set -uo pipefail
out="$(realpath -m "${OUT:-gpu-logs}")"
mkdir -p "$out"
what="${*:-tests bench}"
build=${EMBER_OPS_BUILD:-build-ops}
# The GPU image has no doctest: the caller carries it in .device/doctest.
if [ ! -f /usr/include/doctest/doctest.h ] && [ -d .device/doctest ]; then
  cp -r .device/doctest/include/doctest /usr/include/ && cp -r .device/doctest/cmake/doctest /usr/lib/cmake/
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$out/commit.txt"

start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DEMBER_BUILD_EXAMPLES=OFF >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" -j16 --target ember_tests_core ember_tests_cuda ember_tests_nn \
  bench_cross_entropy bench_layer_norm >"$out/build.log" 2>&1 ||
  { echo "BUILD FAILED:"; grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

# The CUDA test cases of these ops (doctest name filters).
new_cuda="kernels/cross_entropy*,kernels/layer_norm*,kernels/index*,kernels/select*"
status=0
if [[ "$what" == *tests* ]]; then
  for t in core cuda nn; do
    echo "== ember_tests_$t" | tee -a "$out/tests.log"
    timeout 900 "$build/tests/ember_tests_$t" >"$out/tests_$t.log" 2>&1 || status=1
    tail -3 "$out/tests_$t.log" | tee -a "$out/tests.log"
    grep -B3 -A12 "ERROR:" "$out/tests_$t.log" | head -60
  done
  # The new CUDA cases by name, so that they are seen to run (not skipped).
  echo "== new CUDA cases: $new_cuda" | tee -a "$out/tests.log"
  timeout 900 "$build/tests/ember_tests_cuda" -ts=cuda -tc="$new_cuda" -d 2>&1 |
    grep -E " s: |test cases|assertions" >"$out/tests_new_cuda.log"
  tail -2 "$out/tests_new_cuda.log" | tee -a "$out/tests.log"
fi
if [[ "$what" == *bench* ]]; then
  b=$build/benchmarks
  for bench in cross_entropy layer_norm; do
    echo "== bench_$bench" | tee -a "$out/bench.log"
    timeout 300 "$b/bench_$bench" --json "$out/$bench.json" 2>&1 | tee -a "$out/bench.log" ||
      status=1
  done
  echo "== peer_pytorch.py --only cross_entropy,layer_norm" | tee -a "$out/bench.log"
  timeout 600 python3 benchmarks/peer_pytorch.py --only cross_entropy,layer_norm \
    --json "$out/peer.json" 2>&1 | tee -a "$out/bench.log" || status=1
  python3 benchmarks/results_table.py "$out" | sed -n '/Cross-entropy/,$p' | tee "$out/RESULTS_ops.md"
fi
if [[ "$what" == *sanitize* ]]; then
  for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 1 "$build/tests/ember_tests_cuda" -ts=cuda \
      -tc="$new_cuda" >"$out/sanitize_$tool.log" 2>&1 || { echo "$tool failed"; status=1; }
    tail -5 "$out/sanitize_$tool.log"
  done
fi
echo "total: $(( $(date +%s) - start )) s, status $status"
exit $status
