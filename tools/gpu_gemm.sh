#!/usr/bin/env bash
# Issue 17 on the GPU machine in one call (aimed at ~5 minutes on one H200; each
# step's time is stamped in summary.txt):
#   1. builds tools/gemm_probe (nvcc alone, with the hang watchdog) and, at the same
#      time, the CMake targets the rest needs (Release, sm_90: ember_tests_cuda,
#      bench_linear; bench_train_step with TRAIN_STEP=1);
#   2. while CMake builds: the probe's correctness groups (PROBE_CHECK, default
#      "diag ping": layouts and the ping-pong schedule against cuBLASLt and float64);
#   3. once the CPU is quiet: the probe's timing groups (PROBE_TIME, default
#      "sched dispatch": each schedule side by side, the main loop alone, and the
#      sweep behind the dispatch rule with a SUMMARY line per shape);
#   4. the GEMM and Linear test cases of ember_tests_cuda (TESTS, a doctest -tc
#      filter; "*" runs the whole binary);
#   5. bench_linear (BENCH_DTYPES, default tf32,bf16; --quick) and PyTorch's peer
#      on the same shapes, joined into one table (RESULTS.md: ratios to PyTorch);
#   6. with TRAIN_STEP=1 (about 1-2 minutes more): bench_train_step with
#      EMBER_GEMM=ours and =cublas, and PyTorch's peer (the 4 x 4096 MLP step).
# Logs under $OUT (default ./gpu-logs/gemm); summary.txt says what passed.
# Also: EMBER_GEMM_NCU=1 adds an ncu report of the 8192x4096x4096 forward (bf16:
# ours cooperative, ours ping-pong, cuBLASLt; fp32: ours SIMT, cuBLAS's: tensor
# pipe, stalls, occupancy, L2); BUILD_JOBS (default 16); PROBE_CHECK / PROBE_TIME "" skip those groups;
# GEMM_BUILD=build-gpu reuses an existing Release build directory (no reconfigure).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out="$(realpath -m "${OUT:-gpu-logs/gemm}")"
mkdir -p "$out"
jobs=${BUILD_JOBS:-16}
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
export NCCL_NVLS_ENABLE=0
# The GPU image has no doctest: the caller carries it in .device/doctest.
if [ ! -f /usr/include/doctest/doctest.h ] && [ -d .device/doctest ]; then
  cp -r .device/doctest/include/doctest /usr/include/ && cp -r .device/doctest/cmake/doctest /usr/lib/cmake/
fi
export PATH=$PATH:/usr/local/cuda/bin
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "nvcc: $(nvcc --version | tail -1)"
  echo "torch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not installed')"
} | tee "$out/env.txt"

# 1. CMake in the background; the probe's build in the foreground (its own
# script builds every translation unit in parallel).
build="${GEMM_BUILD:-build-gemm}"
targets=(ember_tests_cuda bench_linear)
[ "${TRAIN_STEP:-0}" = 1 ] && targets+=(bench_train_step)
(
  { [ -n "${GEMM_BUILD:-}" ] && [ -f "$build/CMakeCache.txt" ]; } ||
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DEMBER_BUILD_EXAMPLES=OFF >"$out/configure.log" 2>&1 &&
    cmake --build $build -j"$jobs" --target "${targets[@]}" >"$out/build.log" 2>&1
  echo $? >"$out/build.status"
) &
cmake_pid=$!

# 2. The probe: build, then its correctness groups while CMake builds. Its objects
# and binary stay out of $OUT (they are large); its logs are copied there at the end.
probe_out="$PWD/build-gemm-probe"
read -ra checks <<<"${PROBE_CHECK-diag ping}"
[ "${#checks[@]}" -gt 0 ] || checks=(--build-only)
OUT="$probe_out" PROBE_TIMEOUT=${PROBE_TIMEOUT:-120} bash tools/gemm_probe.sh "${checks[@]}" \
  >"$out/probe_check.txt" 2>&1
probe_status=$?
stamp "probe build + correctness (${checks[*]}): exit $probe_status ($(grep -c PASS "$out/probe_check.txt") PASS, $(grep -c FAIL "$out/probe_check.txt") FAIL)"
grep -E "BUILD FAILED|LINK FAILED|FAIL|TIMED OUT|!!" "$out/probe_check.txt" | head -20

wait $cmake_pid
cmake_status=$(cat "$out/build.status" 2>/dev/null || echo 1)
stamp "cmake build: exit $cmake_status"
[ "$cmake_status" = 0 ] || { grep -E "error|FAILED" "$out/build.log" | head -30; }

# 3. The probe's timing groups, the CPU idle now.
read -ra timing <<<"${PROBE_TIME-sched dispatch}"
time_status=0
if [ "${#timing[@]}" -gt 0 ] && [ -x "$probe_out/gemm_probe" ]; then
  PROBE_TIMEOUT=${PROBE_TIMEOUT:-150} "$probe_out/gemm_probe" "${timing[@]}" >"$out/probe_time.txt" 2>&1
  time_status=$?
  stamp "probe timing (${timing[*]}): exit $time_status"
  grep -E "^== group|SUMMARY|FAIL|!!" "$out/probe_time.txt" | tee -a "$out/summary.txt"
fi

status=$(( probe_status != 0 || cmake_status != 0 || time_status != 0 ))
b=$build
# 4. The GEMM and Linear tests (suites cuda and cuda_sm90; each is skipped where
# the device cannot run it).
if [ -x $b/tests/ember_tests_cuda ]; then
  timeout 300 $b/tests/ember_tests_cuda --no-colors=true -tc="${TESTS-kernels/gemm*,kernels/linear*}" \
    >"$out/tests_cuda.txt" 2>&1
  rc=$?
  stamp "ember_tests_cuda: exit $rc: $(grep -E '^\[doctest\] (test cases|assertions)' "$out/tests_cuda.txt" | tr '\n' ' ')"
  [ $rc = 0 ] || { status=1; grep -B3 -A12 "ERROR" "$out/tests_cuda.txt" | head -60; }
fi

# 5. bench_linear and PyTorch's peer, joined.
if [ -x $b/benchmarks/bench_linear ]; then
  timeout 240 $b/benchmarks/bench_linear --quick --dtype "${BENCH_DTYPES:-tf32,bf16}" \
    --json "$out/linear.json" >"$out/bench_linear.txt" 2>&1
  rc=$?
  stamp "bench_linear: exit $rc"
  [ $rc = 0 ] || { status=1; grep "VALIDATION FAILED" "$out/bench_linear.txt" | head; }
  timeout 180 python3 benchmarks/peer_pytorch.py --only linear --json "$out/peer.json" \
    >"$out/peer_linear.txt" 2>&1
  stamp "peer_pytorch (linear): exit $?"
  python3 benchmarks/results_table.py "$out" >"$out/RESULTS.md" 2>&1
fi

# 6. The MLP training step with each backend, and PyTorch's.
if [ "${TRAIN_STEP:-0}" = 1 ] && [ -x $b/benchmarks/bench_train_step ]; then
  for side in ours cublas; do
    EMBER_GEMM=$side timeout 180 $b/benchmarks/bench_train_step --quick \
      --json "$out/train_step_$side.json" >"$out/train_step_$side.txt" 2>&1
    rc=$?
    stamp "bench_train_step EMBER_GEMM=$side: exit $rc"
    [ $rc = 0 ] || status=1
    grep -E "mlp" "$out/train_step_$side.txt" | tee -a "$out/summary.txt"
  done
  timeout 180 python3 benchmarks/peer_train_step.py --quick --json "$out/peer_train_step.json" \
    >"$out/peer_train_step.txt" 2>&1
  stamp "peer_train_step: exit $?"
  grep -E "mlp" "$out/peer_train_step.txt" | tee -a "$out/summary.txt"
fi

# Optional: what limits the forward (tensor pipe, stalls, occupancy, L2), ours and cuBLASLt.
if [ "${EMBER_GEMM_NCU:-0}" = 1 ] && command -v ncu >/dev/null && [ -x "$probe_out/gemm_probe" ]; then
  timeout 240 ncu --target-processes all --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
    --section WarpStateStats --section SchedulerStats "$probe_out/gemm_probe" --child ncu \
    >"$out/ncu.txt" 2>&1
  stamp "ncu: exit $? (see ncu.txt)"
fi

mkdir -p "$out/probe"
cp "$probe_out"/{build.log,ptxas_summary.txt,sass_summary.txt} "$out/probe/" 2>/dev/null
stamp "done: status $status (logs in $out)"
exit $status
