#!/usr/bin/env bash
# One call on the GPU machine: build (Release, or EMBER_GPU_BUILD_TYPE; sm_90), run every
# test, the examples and the benchmarks, and leave logs in $OUT (or ./gpu-logs).
# Usage: tools/gpu_run.sh [tests] [examples] [bench] [sanitize] [cpu] [conv]   (default: tests
#        examples bench)
#   EMBER_CTEST_JOBS=8                    ctest -j (default 4)
#   cpu: tools/pool_probe.cpp at 1, 2, 4, 8, 16 threads and benchmarks/bench_cpu.sh at
#        1, 2 and 16 threads (EMBER_BENCH_CPU_THREADS, EMBER_BENCH_CPU_REPS), logs in $OUT
#   conv: benchmarks/compare.sh's conv set (bench_conv against PyTorch with cuDNN,
#        EMBER_COMPARE_REPS repetitions, default 5) into $OUT/conv, then bench_conv once
#        with EMBER_CONV_COMPOSED=1 (the composed columns: the before), cut after
#        EMBER_CONV_COMPOSED_TIMEOUT seconds (default 120)
#   EMBER_GPU_PREBUILT=.device/bg.tar.xz  unpack a build made by tools/pack_gpu_build.sh
#                                         instead of building (CTest tests that call this
#                                         machine's cmake or python3 by their packed paths
#                                         show as "Not Run" where those differ)
set -uo pipefail
out="$(realpath -m "${OUT:-gpu-logs}")"
mkdir -p "$out"
what="${*:-tests examples bench}"
export NCCL_NVLS_ENABLE=0
# doctest, carried in .device (tools/gpu_setup.sh).
# shellcheck source=tools/gpu_setup.sh
. tools/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

start=$(date +%s)
if [ -n "${EMBER_GPU_PREBUILT:-}" ]; then
  # A build packed elsewhere by tools/pack_gpu_build.sh: unpacked, not rebuilt.
  tar -xJf "$EMBER_GPU_PREBUILT" || { echo "cannot unpack $EMBER_GPU_PREBUILT"; exit 1; }
  ember_fix_ctest_interpreters build-gpu
  if [ "$(cat build-gpu/ember_source_dir.txt 2>/dev/null)" != "$PWD" ]; then
    echo "warning: build-gpu was built in $(cat build-gpu/ember_source_dir.txt 2>/dev/null || echo '?')," \
         "this tree is $PWD: tests that read data through the compiled-in path will fail"
  fi
  echo "build: unpacked $EMBER_GPU_PREBUILT (commit $(cat build-gpu/ember_commit.txt 2>/dev/null || echo '?'))"
else
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=${EMBER_GPU_BUILD_TYPE:-Release} -DCMAKE_CUDA_ARCHITECTURES=90 \
    >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  cmake --build build-gpu -j16 -- -k 0 >"$out/build.log" 2>&1 || { echo "BUILD FAILED (continuing with what built):"; grep -E "error|FAILED" "$out/build.log" | head -30; }
  echo "build: $(( $(date +%s) - start )) s"
fi

status=0
if [[ "$what" == *tests* ]]; then
  (cd build-gpu && ctest --output-on-failure -j"${EMBER_CTEST_JOBS:-4}" -O Testing/Temporary/LastTestConsole.log \
     >"$out/ctest.log" 2>&1) || status=1
  tail -15 "$out/ctest.log"
  tools/test_summary.sh build-gpu | tee -a "$out/ctest.log" || status=1
  grep -B2 -A12 "ERROR\|FAILED" build-gpu/Testing/Temporary/LastTest.log | head -80
fi
if [[ "$what" == *examples* ]]; then
  for e in build-gpu/examples/*; do
    [ -x "$e" ] && [ -f "$e" ] || continue
    echo "== $e" >>"$out/examples.log"
    timeout 120 "$e" >>"$out/examples.log" 2>&1 || { echo "example $e failed"; status=1; }
  done
  tail -40 "$out/examples.log"
fi
if [[ "$what" == *bench* ]]; then
  for b in build-gpu/benchmarks/bench_*; do
    echo "== $b" | tee -a "$out/bench.log"
    timeout 300 "$b" 2>&1 | tee -a "$out/bench.log" || status=1
  done
fi
if [[ "$what" == *sanitize* ]]; then
  # The same as make gpu-sanitize and tools/gpu_evidence.sh's sanitize stage.
  tools/gpu_sanitize.sh build-gpu 2>&1 | tee "$out/sanitizer.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [[ "$what" == *cpu* ]]; then
  # The pool's hand-off against OpenMP's (tools/pool_probe.cpp, seconds to build), then
  # bench_cpu against libtorch, interleaved (benchmarks/bench_cpu.sh).
  if g++ -O2 -march=native -std=c++20 -fopenmp -I. tools/pool_probe.cpp core/base/error.cpp \
       -o build-gpu/pool_probe -lpthread >"$out/pool_probe_build.log" 2>&1; then
    build-gpu/pool_probe 1 2 4 8 16 2>&1 | tee "$out/pool_probe.txt"
  else
    echo "pool_probe did not build"; tail -5 "$out/pool_probe_build.log"; status=1
  fi
  # shellcheck disable=SC2086
  benchmarks/bench_cpu.sh build-gpu "${EMBER_BENCH_CPU_REPS:-5}" ${EMBER_BENCH_CPU_THREADS:-1 2 16} \
    2>&1 | tee "$out/bench_cpu.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [[ "$what" == *conv* ]]; then
  EMBER_BENCH_BUILD=build-gpu EMBER_COMPARE_SET=conv benchmarks/compare.sh "$out/conv" \
    >"$out/conv_compare.log" 2>&1 || status=1
  tail -40 "$out/conv_compare.log"
  [ -f "$out/conv/RESULTS.md" ] && cat "$out/conv/RESULTS.md"
  EMBER_CONV_COMPOSED=1 timeout "${EMBER_CONV_COMPOSED_TIMEOUT:-120}" build-gpu/benchmarks/bench_conv \
    2>&1 | tee "$out/bench_conv_composed.txt"
fi
echo "total: $(( $(date +%s) - start )) s, status $status"
exit $status
