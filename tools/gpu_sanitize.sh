#!/usr/bin/env bash
# Runs the CUDA test cases (doctest suite "cuda") of every test binary of a build
# under compute-sanitizer: memcheck, racecheck, initcheck and synccheck. Needs a
# GPU. Usage: tools/gpu_sanitize.sh [build-dir]   (make gpu-sanitize)
#   EMBER_GPU_SANITIZERS="memcheck initcheck"  runs only those tools
#   EMBER_GPU_SANITIZE_ONLY=cuda               only build/tests/ember_tests_cuda
#   EMBER_GPU_SANITIZE_SUITES=cuda_sm90        only that doctest suite (default cuda,cuda_sm90)
# Each run's log is kept in <build>/gpu-sanitize/<binary>.<tool>.log; the table
# at the end says what ran, how many test cases and what each tool found.
set -uo pipefail
build="${1:-build}"
cd "$(dirname "$0")/.."
cs="$(command -v compute-sanitizer || true)"
for candidate in /usr/local/cuda/bin/compute-sanitizer \
                 /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -n "$cs" ] || { [ -x "$candidate" ] && cs="$candidate"; }
done
if [ -z "$cs" ]; then
  echo "gpu-sanitize: compute-sanitizer not found (it ships with the CUDA Toolkit)" >&2
  exit 1
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-sanitize: no GPU on this machine; run it on the GPU machine" >&2
  exit 1
fi
tools=${EMBER_GPU_SANITIZERS:-memcheck racecheck initcheck synccheck}
logs="$build/gpu-sanitize"
mkdir -p "$logs"

# The soak tests run 100,000 steps: minutes natively, hours under a sanitizer.
# Their kernels are the ones every other CUDA test case already runs.
doctest_args=("-ts=${EMBER_GPU_SANITIZE_SUITES:-cuda,cuda_sm90}" "-tce=soak/*" --no-intro=true --no-colors=true)
# memcheck: no --leak-check, because the per-device caching allocators
# (core/memory, one per device from cuda/device_allocator.cpp) are deliberately
# never destroyed, so their segments are still held at exit by design; everything
# else it checks is on.
declare -A tool_args=(
  [memcheck]="--tool memcheck"
  [racecheck]="--tool racecheck --racecheck-report analysis"
  [initcheck]="--tool initcheck"
  [synccheck]="--tool synccheck"
)

status=0
summary=()
for bin in "$build"/tests/ember_tests_${EMBER_GPU_SANITIZE_ONLY:-*}; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  for tool in $tools; do
    log="$logs/$name.$tool.log"
    echo "gpu-sanitize: $tool on $name (log: $log)"
    start=$(date +%s)
    if [ "$name" = ember_tests_parallel ]; then
      # One rank (NCCL refuses two ranks on one GPU); multi-rank runs need 2+ GPUs.
      # --report-api-errors no: ncclCommInitAll probes its own kernels with
      # cudaFuncGetAttributes and some probes fail by design (no image for this
      # GPU): 12 "cudaErrorNoKernelImageForDevice" reports, all inside
      # libnccl.so, on the H200 (2026-11-29). Kernel memory errors are still
      # reported, and every CUDA call of ours goes through EMBER_CUDA_CHECK, so an
      # API error of ours throws and fails the test case instead.
      api=()
      [ "$tool" = memcheck ] && api=(--report-api-errors no)
      # initcheck on 2+ GPUs: NCCL's all-reduce kernels read words of NCCL's own
      # buffers before the peer writes them (on 2 H200s, 2026-11-29: 394
      # "Uninitialized __global__ memory read" reports, 322 in
      # ncclDevKernel_AllReduce_Sum_f32_RING_LL and 72 in
      # ncclDevFunc_AllReduce_Sum_f32_RING_SIMPLE, none elsewhere). Every report
      # is printed so that those can be told from ours below; a report in any
      # other kernel still fails.
      [ "$tool" = initcheck ] && api=(--print-limit 1000000)
      # synccheck on 2+ GPUs: it flags NCCL's ring all-reduce kernel
      # (ncclDevFunc_AllReduce_Sum_f32_RING_SIMPLE: 1344 "Barrier error detected.
      # Divergent thread(s) in block", nothing in any other kernel) and then
      # aborts it (CUDA error 719), failing the NCCL test cases. So synccheck
      # sees one GPU here: DataParallel and the communicator still run, with a
      # single NCCL rank.
      visible=()
      [ "$tool" = synccheck ] && visible=(CUDA_VISIBLE_DEVICES=0)
      env "${visible[@]}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 \
        mpirun -np 1 --allow-run-as-root \
        "$cs" ${tool_args[$tool]} "${api[@]}" --error-exitcode 86 "$bin" "${doctest_args[@]}" >"$log" 2>&1
    else
      "$cs" ${tool_args[$tool]} --error-exitcode 86 "$bin" "${doctest_args[@]}" >"$log" 2>&1
    fi
    rc=$?
    secs=$(( $(date +%s) - start ))
    # memcheck/initcheck/synccheck: "ERROR SUMMARY: N errors"; racecheck:
    # "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)".
    errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error|\([0-9]+ errors' "$log" | grep -Eo '[0-9]+' | tail -1)
    cases=$(grep -E '^\[doctest\] test cases:' "$log" | tail -1 | sed 's/^\[doctest\] //')
    note=""
    if [ "$name" = ember_tests_parallel ] && [ "$tool" = initcheck ] && [ "$rc" -eq 86 ] &&
       ! grep -q 'errors were not printed' "$log"; then
      in_nccl=$(grep -cE '^=========     at ncclDev(Kernel|Func)_' "$log")
      if [ "${errors:-0}" -gt 0 ] && [ "$in_nccl" -eq "${errors:-0}" ] &&
         grep -q '^\[doctest\] Status: SUCCESS' "$log"; then
        rc=0
        note=" (all $in_nccl inside NCCL's kernels)"
      fi
    fi
    verdict=clean$note
    if [ "$rc" -ne 0 ]; then
      verdict="FAILED (exit $rc)"
      status=1
    fi
    summary+=("$(printf '%-10s %-24s %-9s errors=%-4s %4ss  %s' "$tool" "$name" "$verdict" \
                 "${errors:-?}" "$secs" "${cases:-no doctest summary}")")
  done
done
echo
echo "gpu-sanitize: what ran (suites ${EMBER_GPU_SANITIZE_SUITES:-cuda,cuda_sm90}, soak excluded)"
printf '%s\n' "${summary[@]}"
[ $status -eq 0 ] && echo "gpu-sanitize: clean" || echo "gpu-sanitize: FAILURES, see $logs"
exit $status
