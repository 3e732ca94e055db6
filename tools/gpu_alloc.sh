#!/usr/bin/env bash
# One call on the GPU machine for the caching allocator (issues 15 and 20): build
# the allocator tests and benchmarks in Release (sm_90), run the memory tests and
# the CUDA tests (suite "cuda" included: expandable segments on the device, two
# concurrent captures, the OOM path), bench_allocator (round trips against
# cudaMallocAsync, trace replays native vs expandable) and bench_alloc_train (a
# varying-batch training loop, native vs expandable, interleaved runs), and leave
# at most 7 files in $OUT (or ./gpu-logs).
# Usage: tools/gpu_alloc.sh [tests] [bench] [train]   (default: all three)
set -uo pipefail
out="$(realpath -m "${OUT:-gpu-logs}")"
mkdir -p "$out"
what="${*:-tests bench train}"
# The GPU image has no doctest: the caller carries it in .device/doctest.
if [ ! -f /usr/include/doctest/doctest.h ] && [ -d .device/doctest ]; then
  cp -r .device/doctest/include/doctest /usr/include/ && cp -r .device/doctest/cmake/doctest /usr/lib/cmake/
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

start=$(date +%s)
targets="ember_tests_memory ember_tests_cuda bench_allocator bench_alloc_train"
{ cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
  cmake --build build-gpu -j16 --target $targets; } >"$out/build.log" 2>&1 \
  || { echo "BUILD FAILED:"; grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

status=0
if [[ "$what" == *tests* ]]; then
  for t in memory cuda; do
    echo "== ember_tests_$t" >>"$out/tests.log"
    timeout 600 build-gpu/tests/ember_tests_$t >>"$out/tests.log" 2>&1 || { echo "ember_tests_$t failed"; status=1; }
  done
  grep -E "^\[doctest\] (test cases|assertions)|ERROR|FATAL" "$out/tests.log" | head -40
fi
if [[ "$what" == *bench* ]]; then
  timeout 300 build-gpu/benchmarks/bench_allocator --json "$out/allocator.json" 2>&1 \
    | tee "$out/bench_allocator.log" || status=1
fi
if [[ "$what" == *train* ]]; then
  timeout 400 build-gpu/benchmarks/bench_alloc_train --repeats 5 --json "$out/alloc_train.json" 2>&1 \
    | tee "$out/alloc_train.log" || status=1
fi
echo "total: $(( $(date +%s) - start )) s, status $status"
exit $status
