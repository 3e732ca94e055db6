#!/usr/bin/env bash
# compute-sanitizer over every CUDA suite (issue 33): the doctest suites "cuda" and
# "cuda_sm90" of every test binary of a build (ember_tests_parallel on one rank,
# under mpirun), under memcheck, racecheck, initcheck and synccheck. Needs a GPU.
# `make gpu-sanitize` and the stage `sanitize` of tools/gpu_evidence.sh run it.
# A change to CUDA code is not done until this prints "gpu-sanitize: clean".
#
# Usage: tools/gpu_sanitize.sh [build-dir]   (default build)
#   EMBER_GPU_SANITIZERS="memcheck initcheck"  only those tools (default: all four)
#   EMBER_GPU_SANITIZE_ONLY=cuda               only build/tests/ember_tests_cuda (comma-
#                                              separated for several: core,nn)
#   EMBER_GPU_SANITIZE_SUITES=cuda_sm90        only that doctest suite (default cuda,cuda_sm90)
#   EMBER_GPU_SANITIZE_CASES='kernels/linear*' only the test cases doctest's -tc matches
#                                              (comma-separated; default: every case)
#   EMBER_GPU_SANITIZE_JOBS=6                  sanitizer runs at once (default 6; 1: one
#                                              after the other)
#   EMBER_GPU_SANITIZE_SHARD=6                 test cases per sanitizer run: a binary with
#                                              more runs in several (--first/--last);
#                                              0: each binary in one run
#   EMBER_GPU_SANITIZE_TIMEOUT=480             seconds one sanitizer run may take; one
#                                              that runs past it fails (exit 124), the
#                                              others still report
#   EMBER_GPU_SANITIZE_PROBE=0                 skip the cuBLASLt probe (then no nvjet
#                                              hazard can be set apart, unless
#                                              EMBER_CUBLASLT_EVIDENCE names a kernel list
#                                              an earlier probe run wrote)
#   EMBER_GPU_SANITIZE_SMALL_MLP_BATCH=256     under the tools of _SMALL_TOOLS, the batch
#   EMBER_GPU_SANITIZE_SMALL_MLP_WIDTH=1024    and width of core's MLP memory cases and
#   EMBER_GPU_SANITIZE_SMALL_VARYING_DIVISOR=8 the divisor of its varying batch's sizes
#                                              (see small_sizes; 0: the test's own)
#   EMBER_GPU_SANITIZE_SMALL_TOOLS="racecheck synccheck"  the tools that run them small
#   EMBER_GPU_SANITIZE_DEADLINE=560            seconds from the start: no run starts
#                                              after it (less a reserve for the replay),
#                                              runs still going are stopped, and the
#                                              table still prints, naming them as failed
#                                              (for a caller with a wall-clock limit;
#                                              default: none)
#   EMBER_COMMIT=<sha>                         the commit the table names (default: git)
#   EMBER_GPU_SANITIZE_RESUME=DIR              an earlier run's logs of the same build
#                                              (DIR/table.txt, which every run writes
#                                              into its logs, and the logs beside it):
#                                              the runs that table calls clean are not
#                                              run again, their logs are judged anew
#                                              and the table marks them "resumed"; for
#                                              a set cut by a deadline, finished in a
#                                              later call. The table's commit and suites
#                                              must be this run's.
# What a full run covers: every test case of those suites in every binary except the
# soak tests (100,000 steps: hours under a sanitizer; their kernels are the ones the
# other cases run), plus the planted bugs and the probe below.
#
# What makes it fail, and the only things set apart (each with its evidence):
# - Any error report of any tool, an API error included, and any test case failing.
# - API errors: the test cases named in api_error_cases below provoke a CUDA error
#   on purpose; they run in their own invocation with --report-api-errors no (their
#   kernels are still checked). Every other case runs with API errors reported.
# - racecheck hazards inside cuBLASLt's own kernels (nvjet_*, see set_apart_kernels):
#   counted apart by kernel name, and only in kernels that tools/cublaslt_racecheck_
#   probe.sh, run first, shows racecheck reporting without ember (cuBLASLt called
#   directly). A hazard in any other kernel fails.
# - initcheck after cuBLAS(Lt): the tool does not see those kernels' stores; when the
#   probe shows that without ember, the initcheck runs pre-fill cuBLAS(Lt) outputs
#   (see "initcheck and cuBLASLt" below); planted checks show the pre-fill hides
#   nothing else.
# - NCCL (ember_tests_parallel): see the comments at its invocation.
# - The planted bugs (tests/sanitize/sanitizer_planted.cu) must FAIL: an
#   out-of-bounds write under memcheck, a shared-memory race under racecheck ("planted
#   OOB caught", "planted race caught"), an uninitialized read and a read past a
#   cuBLASLt output under initcheck with the pre-fill on; the same kernels without the
#   bugs must be clean.
# Logs: <build>/gpu-sanitize/<binary>.<tool>[.<variant>].log; the table at the end says
# what ran, on which commit, how many test cases and what each tool found.
set -uo pipefail
build="${1:-build}"
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
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
# The commit: EMBER_COMMIT (a copy of the tree may have no .git, or a stale one), else git.
commit="${EMBER_COMMIT:-}"
if [ -z "$commit" ]; then
  commit=$(git rev-parse --short=12 HEAD 2>/dev/null || true)
  if [ -n "$commit" ]; then
    git diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
  else
    commit="unknown (no git here: set EMBER_COMMIT)"
  fi
fi
tools=${EMBER_GPU_SANITIZERS:-memcheck racecheck initcheck synccheck}
for t in $tools; do
  case "$t" in
    memcheck | racecheck | initcheck | synccheck) ;;
    *)
      echo "gpu_sanitize: EMBER_GPU_SANITIZERS names '$t'; the tools are memcheck," \
           "racecheck, initcheck and synccheck (space-separated)" >&2
      exit 2
      ;;
  esac
done
[ -n "${tools// /}" ] || { echo "gpu_sanitize: EMBER_GPU_SANITIZERS names no tool" >&2; exit 2; }
suites=${EMBER_GPU_SANITIZE_SUITES:-cuda,cuda_sm90}
user_cases=${EMBER_GPU_SANITIZE_CASES:-}
max_jobs=${EMBER_GPU_SANITIZE_JOBS:-6}
run_timeout=${EMBER_GPU_SANITIZE_TIMEOUT:-480}
shard=${EMBER_GPU_SANITIZE_SHARD:-6}
logs="$build/gpu-sanitize"
mkdir -p "$logs"
rm -f "$logs"/*.log "$logs"/*.result "$logs"/*.unclassified

# Test cases that provoke a CUDA API error on purpose, "binary|test case" (doctest
# -tc patterns: * and ? are wildcards, a comma would split the pattern). Each runs,
# under every tool, in its own invocation with --report-api-errors no; the other
# runs exclude it. An entry that matches no test case fails the run.
api_error_cases=(
  # A cudaMallocAsync pool capped at 16 MiB must refuse the trace's allocations:
  # MallocAsyncPolicy::run (cuda/replay_policies.cpp) gets cudaErrorMemoryAllocation
  # from cudaMallocFromPoolAsync, counts the OOM and clears it with
  # cudaGetLastError (memcheck on the H200, 2026-12-01, d85ae97: those 2 API
  # errors, nothing else).
  "ember_tests_cuda|replay/cuda: cudaMallocAsync replays every event and reports its pool's peaks"
)
# Test cases that read the device's free memory (cudaMemGetInfo), which another
# process allocating at the same moment would move (CTest runs the cuda binary
# alone for them): they run after all other runs, one at a time.
serial_cases=(
  "ember_tests_cuda|allocator/expandable: on the device? pages map on demand and empty_cache*"
)
# Test cases that take minutes under a tool (racecheck over the MLP benchmark's
# predicted-vs-measured steps, then one case for three precisions, ran past 420 s on
# the H200 at 70618d9 while it took ~1 min under initcheck; it is now one case per
# precision): each entry runs in its own invocation, started before every other run,
# with EMBER_GPU_SANITIZE_SLOW_TIMEOUT (default twice the run timeout), so it overlaps
# the rest instead of holding a shard past its time.
slow_cases=(
  "ember_tests_core|predict/cuda: the MLP benchmark in fp32*"
  "ember_tests_core|predict/cuda: the MLP benchmark in TF32*"
  "ember_tests_core|predict/cuda: the MLP benchmark in bf16*"
  # 180 sorts (CUB's segmented radix sort) under racecheck: its shard (cases 67-69) was
  # still running after 250 s on the H200 at d6e7e9b (2026-12-05), stopped by the
  # deadline, and alone it ran past 417 s at bb009a2. Now one case per shape, each alone.
  "ember_tests_cuda|kernels/sort: indices equal the CPU's stable order: small*"
  "ember_tests_cuda|kernels/sort: indices equal the CPU's stable order: one line*"
  "ember_tests_cuda|kernels/sort: indices equal the CPU's stable order: 2000 lines*"
  "ember_tests_cuda|kernels/sort: indices equal the CPU's stable order: 7 lines*"
  # Under racecheck the shards holding the wgmma forwards' case (then one case of six
  # forward variants) and the fused Linear's case were still running after 347 s and
  # 315 s on an H100 at f2e5c76 (2026-12-06), stopped by the deadline. The forwards are
  # now three cases of two variants each; each of these runs alone, started first.
  "ember_tests_cuda|kernels/attention: the wgmma forward versions 2 and 3*"
  "ember_tests_cuda|kernels/attention: the wgmma forward version 4*"
  "ember_tests_cuda|kernels/attention: the wgmma forward versions 5 and 6*"
  "ember_tests_cuda|kernels/linear: fused forward and backward match the CPU on both backends*"
)
slow_timeout=${EMBER_GPU_SANITIZE_SLOW_TIMEOUT:-$(( 2 * run_timeout ))}
# Even alone, racecheck over the fp32 and the TF32 MLP case (batch 8192, 4 x 4096)
# ran past 570 s each on the H200 at 3794262, longer than one device call may take;
# bf16 about 570 s; memcheck took 142 s, initcheck 63 s, synccheck 29 s. At batch 1024
# (fb7cb20, 2026-12-03) bf16 took 151 s, but fp32 (ember's own GEMM) and TF32 still ran
# past 575 s, as did core's shard with the varying batch (3 x 1024 wide, batches up to
# 2048). With those run smaller under racecheck (bd2d314, 2026-12-03), every run of
# core, memory, nn, optim and parallel ended within 352 s but synccheck over the bf16
# MLP case at batch 1024, which ran past 570 s there as at fb7cb20. So under racecheck
# and synccheck the core binary's predict cases run smaller: the MLP at this batch and
# width, the varying batch's batch sizes divided by this divisor (the test reads
# EMBER_TEST_PREDICT_MLP_BATCH, _MLP_WIDTH and _VARYING_DIVISOR; defaults 256, 1024,
# 8; 0 for any: the test's own size). Both tools' reports are about the threads of
# one block (shared memory, barriers), so fewer and shorter blocks of the same kernels
# are checked the same way, though a library may pick other kernels for the smaller
# products (cuBLASLt's heuristic; ember's kernels/linear cases cover its own GEMM's
# shapes). memcheck and initcheck keep the full sizes. The table says which sizes ran.
small_mlp_batch=${EMBER_GPU_SANITIZE_SMALL_MLP_BATCH:-256}
small_mlp_width=${EMBER_GPU_SANITIZE_SMALL_MLP_WIDTH:-1024}
small_varying_divisor=${EMBER_GPU_SANITIZE_SMALL_VARYING_DIVISOR:-8}
small_tools=" ${EMBER_GPU_SANITIZE_SMALL_TOOLS-racecheck synccheck} "
small_sizes=()
[ "$small_mlp_batch" != 0 ] && small_sizes+=(EMBER_TEST_PREDICT_MLP_BATCH="$small_mlp_batch")
[ "$small_mlp_width" != 0 ] && small_sizes+=(EMBER_TEST_PREDICT_MLP_WIDTH="$small_mlp_width")
[ "$small_varying_divisor" != 0 ] &&
  small_sizes+=(EMBER_TEST_PREDICT_VARYING_DIVISOR="$small_varying_divisor")
runs_small() {  # tool binary-name: whether that run gets small_sizes
  [ "$2" = ember_tests_core ] && [ ${#small_sizes[@]} -gt 0 ] && [[ "$small_tools" == *" $1 "* ]]
}
# The deadline (EMBER_GPU_SANITIZE_DEADLINE): the sanitizer runs end this many seconds
# before it, leaving time for the replay and the table.
deadline=${EMBER_GPU_SANITIZE_DEADLINE:-0}
deadline_reserve=${EMBER_GPU_SANITIZE_DEADLINE_RESERVE:-60}
for v in deadline deadline_reserve; do
  case "${!v}" in ''|*[!0-9]*)
    echo "gpu-sanitize: EMBER_GPU_SANITIZE_${v^^} must be whole seconds, not '${!v}'" >&2; exit 1;; esac
done
deadline_at=0
[ "$deadline" -gt 0 ] && deadline_at=$(( $(date +%s) + deadline ))
# Kernels whose racecheck hazards are counted apart: cuBLASLt's nvjet GEMM kernels,
# reached through ember's Linear (cuda/blas.cpp). Seen on one H200 at d85ae97
# (2026-12-01): 12 hazards, in nvjet_sm90_tst_64x32_64x16_1x1_h_bz_splitK_NTT and
# nvjet_sm90_tst_64x8_..._splitK_NNT. Evidence that they are cuBLASLt's own:
# tools/cublaslt_racecheck_probe.sh calls the same GEMMs (shapes and dtypes of
# tests/cuda/test_kernels_linear.cpp, the same epilogues, workspace and heuristic)
# through cuBLASLt alone, and PyTorch's F.linear, under racecheck; its run on the
# GPU machine is quoted in the issue 33 note (the lead pastes it there). The regular
# expression alone sets nothing apart: a kernel must also be in the probe's list of
# this run (or EMBER_CUBLASLT_EVIDENCE).
set_apart_kernels='nvjet_[A-Za-z0-9_]+'

# ---------------------------------------------------------------- the planted bugs
planted="$build/tests/ember_sanitizer_planted"
planted_lines=()
status=0
if [ ! -x "$planted" ]; then
  planted_lines+=("planted bugs: $planted is missing (build the target ember_sanitizer_planted): FAILED")
  status=1
else
  # oob under memcheck, race under racecheck: each must be reported, in its kernel.
  "$cs" --tool memcheck --error-exitcode 86 "$planted" oob >"$logs/planted.memcheck.log" 2>&1
  rc=$?
  if [ $rc -eq 86 ] && grep -q 'Invalid __global__ write' "$logs/planted.memcheck.log" &&
     grep -q 'planted_oob_write' "$logs/planted.memcheck.log"; then
    planted_lines+=("planted OOB caught (memcheck: $(grep -m1 -o 'Invalid __global__ write of size [0-9]* bytes' "$logs/planted.memcheck.log") in planted_oob_write)")
  else
    planted_lines+=("planted OOB NOT caught by memcheck (exit $rc, log $logs/planted.memcheck.log): FAILED")
    status=1
  fi
  "$cs" --tool racecheck --racecheck-report analysis --error-exitcode 86 "$planted" race \
    >"$logs/planted.racecheck.log" 2>&1
  rc=$?
  found=$(awk -v pattern='planted_[a-z_]+' -f tools/racecheck_reports.awk "$logs/planted.racecheck.log" |
          awk -F'\t' '$1 == "planted_shared_race" { n++; h += $3 } END { if (n) print n " reports, " h " hazards" }')
  if [ -n "$found" ]; then  # a report of severity Warning alone may leave the exit status 0
    planted_lines+=("planted race caught (racecheck: $found in planted_shared_race)")
  else
    planted_lines+=("planted race NOT caught by racecheck (exit $rc, log $logs/planted.racecheck.log): FAILED")
    status=1
  fi
  # The same kernels without their bugs: clean under both tools.
  for tool in memcheck racecheck; do
    if "$cs" --tool $tool --error-exitcode 86 "$planted" clean >"$logs/planted.$tool.clean.log" 2>&1; then
      planted_lines+=("planted kernels without their bugs: $tool clean")
    else
      planted_lines+=("planted kernels without their bugs: $tool NOT clean (log $logs/planted.$tool.clean.log): FAILED")
      status=1
    fi
  done
fi

# ---------------------------------------------------------------- the cuBLASLt probe
evidence="${EMBER_CUBLASLT_EVIDENCE:-}"
probe_pid=""
if [ "${EMBER_GPU_SANITIZE_PROBE:-1}" != 0 ] && [[ " $tools " == *" racecheck "* ]]; then
  evidence="$logs/probe/cublaslt_hazard_kernels.txt"
  rm -f "$evidence"
  probe_limit=$run_timeout
  [ "$deadline_at" -gt 0 ] && [ $(( deadline - deadline_reserve )) -lt "$probe_limit" ] &&
    probe_limit=$(( deadline - deadline_reserve > 10 ? deadline - deadline_reserve : 10 ))
  timeout -k 10 "$probe_limit" tools/cublaslt_racecheck_probe.sh "$logs/probe" >"$logs/probe.log" 2>&1 &
  probe_pid=$!
fi
# Every racecheck run also writes each distinct cuBLAS(Lt) call it makes
# (EMBER_BLAS_TRACE, cuda/blas.cpp), into a folder of its own; after the runs the
# probe replays, without ember, exactly the calls of the runs that reported a hazard
# in an nvjet kernel, so such a hazard is checked against the same calls (shapes,
# strides, epilogues, alignments) made by cuBLAS alone. (Replaying every run's calls,
# 1216 distinct ones on the H200 at 0602e10, took longer than 290 s under racecheck.)
trace_dir="$logs/blas-trace"
rm -rf "$trace_dir"
mkdir -p "$trace_dir"

# ---------------------------------------------------------------- initcheck and cuBLASLt
# initcheck does not see the stores of cuBLAS(Lt)'s sm90 tensor-core kernels (on the
# H200 with cuBLAS 13.0, 2026-12-03: sm90_xmma_gemm_f32f32_tf32f32_* in TF32, and
# bf16), so an ember kernel that reads a Linear's output is reported reading
# uninitialized memory (mse_partial_kernel after the TF32 MLP's last layer, cast_kernel
# after the bf16 one, in core's "predict/cuda: the MLP benchmark ..."). The evidence,
# gathered here before the runs: the probe calls cuBLASLt alone (no ember) on an output
# left as cudaMalloc gave it, then reads it with a kernel of its own, under initcheck.
# Only when it is reported there do the initcheck runs set
# EMBER_SANITIZE_PREFILL_BLAS_OUTPUTS=1: ember then writes zeros (cudaMemsetAsync,
# which initcheck sees) over exactly the elements each cuBLAS(Lt) call is told to
# write, before the call (cuda/blas.cpp; every call has beta = 0, so results do not
# change). The planted checks below show that the pre-fill hides nothing else: a plain
# uninitialized read is still reported with it on, and after a cuBLASLt Linear the
# 64 floats past its output are reported while the output itself is not. (Marking the
# outputs initialized through NVTX, tried at a4d30a1, did not take in its one run.)
ic_note=""
prefill=0
if [[ " $tools " == *" initcheck "* ]]; then
  ic_probe="$logs/initcheck_probe"
  ic_log="$logs/initcheck_probe.log"
  if nvcc -O2 -std=c++17 -arch=sm_90 -DPROBE_NO_CUPTI tools/cublaslt_racecheck_probe.cu \
       -o "$ic_probe" -lcublasLt -lcublas >"$ic_log" 2>&1; then
    blind=""
    for dt in tf32 bf16; do
      "$cs" --tool initcheck --print-limit 2 "$ic_probe" --uninit-output --dtype $dt \
        --product forward 1024 1024 1024 >"$ic_log.$dt" 2>&1
      grep -q 'read_all_kernel' "$ic_log.$dt" &&
        blind+="${blind:+, }$dt ($(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$ic_log.$dt" | tail -1))"
    done
    if [ -n "$blind" ]; then
      prefill=1
      ic_note="initcheck: the probe (cuBLASLt alone, no ember) reads its own product as uninitialized: $blind; so the initcheck runs pre-fill cuBLAS(Lt) outputs (logs $ic_log.*)"
    else
      ic_note="initcheck: the probe (cuBLASLt alone) reads its TF32 and bf16 products clean: no pre-fill (logs $ic_log.*)"
    fi
  else
    ic_note="initcheck: the probe did not build, so no pre-fill (log $ic_log)"
  fi
  echo "gpu-sanitize: $ic_note"
  if [ -x "$planted" ]; then
    # The planted checks of the pre-fill (run with it on, whatever the probe said).
    pf=(env EMBER_SANITIZE_PREFILL_BLAS_OUTPUTS=1)
    "${pf[@]}" "$cs" --tool initcheck --error-exitcode 86 "$planted" uninit \
      >"$logs/planted.initcheck.log" 2>&1
    rc=$?
    if [ $rc -eq 86 ] && grep -q 'at .*planted_uninit_read(' "$logs/planted.initcheck.log"; then
      planted_lines+=("planted uninitialized read caught (initcheck, pre-fill on: $(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$logs/planted.initcheck.log" | head -1) in planted_uninit_read)")
    else
      planted_lines+=("planted uninitialized read NOT caught by initcheck (exit $rc, log $logs/planted.initcheck.log): FAILED")
      status=1
    fi
    "${pf[@]}" "$cs" --tool initcheck --error-exitcode 86 --print-limit 1000 "$planted" blas-output \
      >"$logs/planted.initcheck.blas.log" 2>&1
    rc=$?
    past=$(grep -c 'at .*planted_uninit_read(' "$logs/planted.initcheck.blas.log")
    inside=$(grep -c 'at .*planted_read_output(' "$logs/planted.initcheck.blas.log")
    if [ $rc -eq 86 ] && [ "$past" -gt 0 ] && [ "$inside" -eq 0 ] &&
       grep -q 'pre-filled before their calls' "$logs/planted.initcheck.blas.log"; then
      planted_lines+=("planted read past a cuBLASLt output caught (initcheck, pre-fill on: $past reports past the output, none inside it)")
    else
      planted_lines+=("planted read past a cuBLASLt output: exit $rc, $past reports past the output, $inside inside it (want >0 and 0; log $logs/planted.initcheck.blas.log): FAILED")
      status=1
    fi
    if "$cs" --tool initcheck --error-exitcode 86 "$planted" clean >"$logs/planted.initcheck.clean.log" 2>&1; then
      planted_lines+=("planted kernels without their bugs: initcheck clean")
    else
      planted_lines+=("planted kernels without their bugs: initcheck NOT clean (log $logs/planted.initcheck.clean.log): FAILED")
      status=1
    fi
  fi
fi

# ---------------------------------------------------------------- the test binaries
# Names of the entries of a "binary|case" list for one binary, comma-joined.
cases_of() {  # binary list-name
  local -n list=$2
  local out="" e
  for e in "${list[@]}"; do
    [ "${e%%|*}" = "$1" ] && out+="${out:+,}${e#*|}"
  done
  printf '%s' "$out"
}
# Whether a case pattern is wanted by EMBER_GPU_SANITIZE_CASES (bash globs, close
# enough to doctest's; case-sensitive).
wanted() {
  [ -z "$user_cases" ] && return 0
  local p
  IFS=, read -ra pats <<<"$user_cases"
  for p in "${pats[@]}"; do
    # shellcheck disable=SC2053
    [[ "$1" == $p ]] && return 0
  done
  return 1
}

declare -A tool_args=(
  # memcheck: no --leak-check, because the per-device caching allocators are
  # deliberately never destroyed (cuda/device_allocator.cpp), so their segments are still
  # held at exit by design; everything else it checks is on.
  [memcheck]="--tool memcheck"
  # Every report printed, so each can be told apart by its kernel.
  [racecheck]="--tool racecheck --racecheck-report analysis --print-limit 1000000"
  [initcheck]="--tool initcheck"
  [synccheck]="--tool synccheck"
)

# A run's log file, inside $logs: binary-name tool variant ("" or "all": the whole binary).
log_name() {
  local variant=$3
  [ "$variant" = all ] && variant=""
  echo "$1.$2${variant:+.$variant}.log"
}

# One sanitizer run in the background; its exit status and time go to <log>.result.
run_one() {  # bin tool variant doctest-args...
  local bin=$1 tool=$2 variant=$3
  shift 3
  local name log start rc
  name=$(basename "$bin")
  log="$logs/$(log_name "$name" "$tool" "$variant")"
  start=$(date +%s)
  local api=()
  [ "$variant" = api-errors ] && api=(--report-api-errors no)
  local limit=$run_timeout
  [[ "$variant" == slow* ]] && limit=$slow_timeout
  local cut=0
  if [ "$deadline_at" -gt 0 ]; then
    local left=$(( deadline_at - deadline_reserve - start ))
    if [ "$left" -le 0 ]; then
      echo "gpu-sanitize: not started: EMBER_GPU_SANITIZE_DEADLINE had come" >"$log"
      echo "not-started 0" >"$log.result"
      return
    fi
    [ "$left" -lt "$limit" ] && { limit=$left; cut=1; }
  fi
  local trace=()
  [ "$tool" = initcheck ] && [ "$prefill" = 1 ] && trace=(EMBER_SANITIZE_PREFILL_BLAS_OUTPUTS=1)
  if [ "$tool" = racecheck ]; then
    mkdir -p "$trace_dir/$name.$tool${variant:+.$variant}"
    trace=(EMBER_BLAS_TRACE="$(realpath "$trace_dir/$name.$tool${variant:+.$variant}")")
  fi
  runs_small "$tool" "$name" && trace+=("${small_sizes[@]}")
  if [ "$name" = ember_tests_parallel ]; then
    # One rank (NCCL refuses two ranks on one GPU); multi-rank runs need 2+ GPUs.
    # memcheck, --report-api-errors no: ncclCommInitAll probes its own kernels with
    # cudaFuncGetAttributes and some probes fail by design (no image for this
    # GPU): 12 "cudaErrorNoKernelImageForDevice" reports, all inside libnccl.so, on
    # the H200 (2026-11-29). Kernel memory errors are still reported, and every CUDA
    # call of ours goes through EMBER_CUDA_CHECK, so an API error of ours throws and
    # fails the test case instead.
    [ "$tool" = memcheck ] && api=(--report-api-errors no)
    # initcheck on 2+ GPUs: NCCL's all-reduce kernels read words of NCCL's own
    # buffers before the peer writes them (on 2 H200s, 2026-11-29: 394
    # "Uninitialized __global__ memory read" reports, 322 in
    # ncclDevKernel_AllReduce_Sum_f32_RING_LL and 72 in
    # ncclDevFunc_AllReduce_Sum_f32_RING_SIMPLE, none elsewhere). Every report is
    # printed so that those can be told from ours below; a report in any other
    # kernel still fails.
    [ "$tool" = initcheck ] && api=(--print-limit 1000000)
    # synccheck on 2+ GPUs: it flags NCCL's ring all-reduce kernel
    # (ncclDevFunc_AllReduce_Sum_f32_RING_SIMPLE: 1344 "Barrier error detected.
    # Divergent thread(s) in block", nothing in any other kernel) and then aborts
    # it (CUDA error 719), failing the NCCL test cases. So synccheck sees one GPU
    # here: DataParallel and the communicator still run, with a single NCCL rank.
    local visible=()
    [ "$tool" = synccheck ] && visible=(CUDA_VISIBLE_DEVICES=0)
    timeout -k 10 "$limit" env "${visible[@]}" "${trace[@]}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 \
      mpirun -np 1 --allow-run-as-root \
      "$cs" ${tool_args[$tool]} "${api[@]}" --error-exitcode 86 "$bin" "$@" >"$log" 2>&1
  else
    timeout -k 10 "$limit" env "${trace[@]}" \
      "$cs" ${tool_args[$tool]} "${api[@]}" --error-exitcode 86 "$bin" "$@" >"$log" 2>&1
  fi
  rc=$?
  local why=""
  [ "$cut" = 1 ] && { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && why=deadline
  echo "$rc $(( $(date +%s) - start )) $why" >"$log.result"
}

# EMBER_GPU_SANITIZE_RESUME: the runs an earlier table of this commit called clean
# ("tool binary variant" keys, variant "all" for a whole binary), their logs copied in.
declare -A resumed=()
resume=${EMBER_GPU_SANITIZE_RESUME:-}
if [ -n "$resume" ]; then
  if [ "$(realpath -m "$resume")" = "$(realpath -m "$logs")" ]; then
    echo "gpu-sanitize: EMBER_GPU_SANITIZE_RESUME must not be $logs (this run clears it)" >&2
    exit 2
  fi
  old_head=$(grep -m1 '^gpu-sanitize at commit ' "$resume/table.txt" 2>/dev/null)
  want_head="gpu-sanitize at commit $commit: suites $suites${user_cases:+, cases $user_cases},"
  if [[ "$old_head" != "$want_head"* ]]; then
    echo "gpu-sanitize: EMBER_GPU_SANITIZE_RESUME=$resume: $resume/table.txt must be a table" \
         "of commit $commit, suites $suites; it says: ${old_head:-nothing (no table.txt)}" >&2
    exit 2
  fi
  while read -r tool name variant; do
    log=$(log_name "$name" "$tool" "$variant")
    if [ -f "$resume/$log" ] && [ -f "$resume/$log.result" ]; then
      cp "$resume/$log" "$resume/$log.result" "$logs/" && resumed["$tool $name $variant"]=1
    fi
  done < <(grep -E '^(memcheck|racecheck|initcheck|synccheck) ' "$resume/table.txt" |
           grep -E '  clean( |$)' | awk '{ print $1, $2, $3 }')
  echo "gpu-sanitize: ${#resumed[@]} clean runs taken from $resume (not run again)"
fi
was_resumed() {  # tool binary-name variant
  [ -n "${resumed["$1 $2 ${3:-all}"]:-}" ]
}
is_resumed() {  # entry
  local bin tool variant
  IFS='|' read -r bin tool variant _ <<<"$1"
  was_resumed "$tool" "$(basename "$bin")" "$variant"
}

common=("-ts=$suites" --no-intro=true --no-colors=true)
[ -n "$user_cases" ] && common+=("-tc=$user_cases")
runs=()     # "bin|tool|variant|doctest args (tab-separated)"
serial=()
start_all=$(date +%s)
bins=()
for only in ${EMBER_GPU_SANITIZE_ONLY//,/ }; do
  # shellcheck disable=SC2206  # $only may be a glob (cor*)
  bins+=("$build"/tests/ember_tests_$only)
done
[ ${#bins[@]} -gt 0 ] || bins=("$build"/tests/ember_tests_*)
for bin in "${bins[@]}"; do
  [ -x "$bin" ] || { echo "gpu-sanitize: no test binary $bin" >&2; continue; }
  name=$(basename "$bin")
  api_cases=$(cases_of "$name" api_error_cases)
  serial_list=$(cases_of "$name" serial_cases)
  slow_list=$(cases_of "$name" slow_cases)
  exclude="soak/*${api_cases:+,$api_cases}${serial_list:+,$serial_list}${slow_list:+,$slow_list}"
  # Split into runs of at most $shard test cases each (doctest's --first/--last count
  # the cases that pass the filters, in file order), so that the slow binaries spread
  # over the parallel runs; the parallel binary (under mpirun) stays whole.
  ranges=("")
  if [ "$shard" -gt 0 ] && [ "$name" != ember_tests_parallel ]; then
    n=$("$bin" --list-test-cases "${common[@]}" "-tce=$exclude" 2>/dev/null |
        sed -n 's/.*unskipped test cases passing the current filters: *\([0-9]*\).*/\1/p')
    if [ "${n:-0}" -gt "$shard" ]; then
      ranges=()
      for ((first = 1; first <= n; first += shard)); do
        last=$(( first + shard - 1 < n ? first + shard - 1 : n ))
        ranges+=("cases$first-$last")
      done
    fi
  fi
  for tool in $tools; do
    for range in "${ranges[@]}"; do
      if [ -z "$range" ] && [ "$name" = ember_tests_parallel ]; then
        # Whole, and 190-200 s per tool even alone (NCCL under the tool): started
        # first, with the slow cases, so that it overlaps the rest (started last at
        # fb7cb20, three of its four tools were still in its first case at the end).
        runs=("$bin|$tool||$(printf '%s\t' "${common[@]}" "-tce=$exclude")" "${runs[@]}")
      elif [ -z "$range" ]; then
        runs+=("$bin|$tool||$(printf '%s\t' "${common[@]}" "-tce=$exclude")")
      else
        first=${range#cases}; last=${first#*-}; first=${first%-*}
        runs+=("$bin|$tool|$range|$(printf '%s\t' "${common[@]}" "-tce=$exclude" "--first=$first" "--last=$last")")
      fi
    done
    # The named cases, only when the case filter wants them (then -tc is theirs).
    for variant in api-errors serial slow; do
      list=$api_cases
      [ $variant = serial ] && list=$serial_list
      [ $variant = slow ] && list=$slow_list
      [ -n "$list" ] || continue
      IFS=, read -ra entries <<<"$list"
      if [ $variant = slow ]; then
        # Each slow case alone (slow1, slow2, ...), ahead of every other run.
        k=0
        for e in "${entries[@]}"; do
          k=$((k + 1))
          wanted "$e" || continue
          runs=("$bin|$tool|slow$k|$(printf '%s\t' "-ts=$suites" --no-intro=true --no-colors=true "-tc=$e")" "${runs[@]}")
        done
        continue
      fi
      for e in "${entries[@]}"; do wanted "$e" || continue
        entry="$bin|$tool|$variant|$(printf '%s\t' "-ts=$suites" --no-intro=true --no-colors=true "-tc=$list")"
        if [ $variant = serial ]; then serial+=("$entry")
        else runs+=("$entry"); fi
        break
      done
    done
  done
done
# Longest first, so that a deadline stops the fewest: the slow cases and the parallel
# binary (placed first above), then racecheck's runs, initcheck's, memcheck's and
# synccheck's. On the H200 at bb009a2 (16 at a time, shards of 3) core's racecheck shards
# took 100-280 s against 40-160 s under initcheck, 5-125 under memcheck and 5-85 under
# synccheck; in tool order the cuda binary's initcheck and synccheck shards never started
# before a 540 s deadline.
order_runs() {
  local pass entry bin tool variant front
  local -a ordered=()
  for pass in first racecheck initcheck memcheck synccheck; do
    for entry in "${runs[@]}"; do
      IFS='|' read -r bin tool variant _ <<<"$entry"
      front=0
      [[ "$variant" == slow* || "$(basename "$bin")" == ember_tests_parallel ]] && front=1
      if [ "$pass" = first ]; then
        [ "$front" = 1 ] && ordered+=("$entry")
      elif [ "$front" = 0 ] && [ "$tool" = "$pass" ]; then
        ordered+=("$entry")
      fi
    done
  done
  runs=("${ordered[@]}")
}
order_runs
launch() {  # entry
  local bin tool variant args
  IFS='|' read -r bin tool variant args <<<"$1"
  IFS=$'\t' read -ra argv <<<"$args"
  echo "gpu-sanitize: $tool on $(basename "$bin")${variant:+ ($variant)}"
  run_one "$bin" "$tool" "$variant" "${argv[@]}"
}
for entry in "${runs[@]}"; do
  is_resumed "$entry" && continue
  while [ "$(jobs -rp | wc -l)" -ge "$max_jobs" ]; do wait -n; done
  launch "$entry" &
done
wait
for entry in "${serial[@]}"; do is_resumed "$entry" || launch "$entry"; done
total_secs=$(( $(date +%s) - start_all ))

# ---------------------------------------------------------------- the verdicts
probe_note=""
if [ -n "$probe_pid" ]; then
  wait "$probe_pid" 2>/dev/null
  echo
  echo "gpu-sanitize: the cuBLASLt probe (tools/cublaslt_racecheck_probe.sh, full output $logs/probe.log):"
  sed -n '/^== verdict/,$p' "$logs/probe.log"
  grep -E '^(cuBLASLt standalone|PyTorch F.linear):' "$logs/probe.log"
  # The replay, under racecheck, of the cuBLAS(Lt) calls of every racecheck run that
  # reported a hazard in an nvjet kernel.
  calls="$logs/blas-calls.txt"
  : >"$calls"
  hazard_runs=0
  for log in "$logs"/*.racecheck*.log; do
    [ -f "$log" ] || continue
    run=$(basename "$log" .log)
    [ -d "$trace_dir/$run" ] || continue
    if awk -v pattern="$set_apart_kernels" -f tools/racecheck_reports.awk "$log" |
       awk -F'\t' '$1 != "other" { found = 1 } END { exit !found }'; then
      cat "$trace_dir/$run"/*.txt >>"$calls" 2>/dev/null
      hazard_runs=$((hazard_runs + 1))
    fi
  done
  sort -u "$calls" -o "$calls"
  if [ -s "$calls" ]; then
    replay_limit=$run_timeout
    if [ "$deadline_at" -gt 0 ]; then
      replay_limit=$(( deadline_at - 5 - $(date +%s) ))
      [ "$replay_limit" -gt "$run_timeout" ] && replay_limit=$run_timeout
      [ "$replay_limit" -lt 10 ] && replay_limit=10
    fi
    timeout -k 10 "$replay_limit" tools/cublaslt_racecheck_probe.sh "$logs/probe-replay" \
      --replay "$(realpath "$calls")" >"$logs/probe-replay.log" 2>&1
    echo "gpu-sanitize: the probe's replay of the $(wc -l <"$calls") distinct cuBLAS(Lt) calls" \
         "of the $hazard_runs racecheck runs with nvjet hazards (full output $logs/probe-replay.log):"
    grep -E '^(cuBLASLt standalone):|^   cublaslt_racecheck_probe: replayed' "$logs/probe-replay.log"
    sed -n '/^== verdict/,$p' "$logs/probe-replay.log"
    if [ -f "$evidence" ] && [ -f "$logs/probe-replay/cublaslt_hazard_kernels.txt" ]; then
      sort -u "$evidence" "$logs/probe-replay/cublaslt_hazard_kernels.txt" -o "$evidence"
    fi
  else
    echo "gpu-sanitize: no racecheck run reported a hazard in an nvjet kernel: no replay"
  fi
fi
[ -n "$evidence" ] && [ -f "$evidence" ] || probe_note="no probe evidence: nothing set apart"

summary=()
set_apart=()
for entry in "${runs[@]}" "${serial[@]}"; do
  IFS='|' read -r bin tool variant _ <<<"$entry"
  name=$(basename "$bin")
  log="$logs/$(log_name "$name" "$tool" "$variant")"
  why=""
  read -r rc secs why <"$log.result" 2>/dev/null || { rc=no-result; secs="?"; }
  # memcheck/initcheck/synccheck: "ERROR SUMMARY: N errors"; racecheck:
  # "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)".
  errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?|\([0-9]+ errors?' "$log" | grep -Eo '[0-9]+' | tail -1)
  cases=$(grep -E '^\[doctest\] test cases:' "$log" | tail -1 | sed 's/^\[doctest\] //')
  ran=$(grep -E '^\[doctest\] test cases:' "$log" | tail -1 | grep -Eo 'test cases: *[0-9]+' | grep -Eo '[0-9]+')
  # A range's doctest summary counts every case that passed the filters, run or
  # not (--first/--last skip the others after counting): say which ran.
  [[ "$variant" == cases* ]] && cases="ran $variant of $ran; ${cases:-no doctest summary}"
  note=""
  passed=no
  grep -q '^\[doctest\] Status: SUCCESS' "$log" && passed=yes
  if [ "$name" = ember_tests_parallel ] && [ "$tool" = initcheck ] && [ "$rc" = 86 ] &&
     ! grep -q 'errors were not printed' "$log"; then
    in_nccl=$(grep -cE '^=========     at ncclDev(Kernel|Func)_' "$log")
    if [ "${errors:-0}" -gt 0 ] && [ "$in_nccl" -eq "${errors:-0}" ] && [ $passed = yes ]; then
      rc=0
      note=" (all $in_nccl inside NCCL's kernels)"
    fi
  fi
  # racecheck: every report is classified, whatever the exit status (a report of
  # severity Warning alone may leave it 0).
  if [ "$tool" = racecheck ] && { [ "$rc" = 86 ] || [ "$rc" = 0 ]; }; then
    reports=$(awk -v pattern="$set_apart_kernels" -f tools/racecheck_reports.awk "$log")
    total=$(printf '%s\n' "$reports" | grep -c .)
    ok=0
    if [ -n "$evidence" ] && [ -f "$evidence" ]; then
      ok=$(printf '%s\n' "$reports" | awk -F'\t' 'FILENAME == ARGV[1] { ev[$1] = 1; next } ($1 in ev) { n++ } END { print n + 0 }' \
           "$evidence" -)
    fi
    if [ "$total" -gt 0 ] && [ "$ok" -eq "$total" ] && [ $passed = yes ] &&
       ! grep -q 'were not printed' "$log"; then
      rc=0
      hz=$(printf '%s\n' "$reports" | awk -F'\t' '{ h += $3 } END { print h }')
      note=" ($total reports, $hz hazards, all in cuBLASLt kernels the probe reproduces: set apart)"
      while read -r k n h; do
        set_apart+=("racecheck $name: $n reports ($h hazards) in $k")
      done < <(printf '%s\n' "$reports" | awk -F'\t' '{ n[$1]++; h[$1] += $3 } END { for (k in n) print k, n[k], h[k] }' | sort)
    elif [ "$total" -gt 0 ]; then
      [ "$rc" = 0 ] && rc=86
      note=" ($((total - ok)) of $total reports not in a kernel set apart by evidence${probe_note:+; $probe_note})"
      printf '%s\n' "$reports" | awk -F'\t' 'FILENAME == ARGV[1] { ev[$1] = 1; next } !($1 in ev) { print "    not set apart: " $4 }' \
        "${evidence:-/dev/null}" - | head -5 >"$log.unclassified"
    fi
  fi
  if [ "$rc" = not-started ] || [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    :  # it did not end: whether its cases matched anything is not known
  elif [[ "$variant" == cases* ]] && [ "${ran:-0}" -eq 0 ]; then
    rc=1
    note=" (this range of test cases ran none)"
  elif [ "$variant" != "" ] && [ "${ran:-0}" -eq 0 ]; then
    rc=1
    note=" (the named test case matched nothing: fix the list in tools/gpu_sanitize.sh)"
  elif [ "$rc" = 0 ] && [ -z "$ran" ]; then
    rc=1  # exit 0 is not clean unless the tests and the tool both said how it went
    note=" (exit 0, but no doctest summary in the log)"
  elif [ "$rc" = 0 ] && [ -z "$errors" ]; then
    rc=1
    note=" (exit 0, but no $tool summary in the log)"
  fi
  if [ "$rc" = not-started ]; then
    note=" (not started: EMBER_GPU_SANITIZE_DEADLINE=${deadline}s had come, less ${deadline_reserve}s for the replay)"
  elif [ "$why" = deadline ]; then
    note+=" (stopped at EMBER_GPU_SANITIZE_DEADLINE=${deadline}s, less ${deadline_reserve}s for the replay)"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    if [[ "$variant" == slow* ]]; then note+=" (ran past EMBER_GPU_SANITIZE_SLOW_TIMEOUT=${slow_timeout}s)"
    else note+=" (ran past EMBER_GPU_SANITIZE_TIMEOUT=${run_timeout}s)"; fi
  fi
  runs_small "$tool" "$name" && note+=" (${small_sizes[*]})"
  was_resumed "$tool" "$name" "$variant" && note+=" (resumed: run earlier, $resume)"
  verdict=clean$note
  if [ "$rc" != 0 ]; then
    verdict="FAILED (exit $rc)$note"
    status=1
  fi
  summary+=("$(printf '%-10s %-24s %-11s errors=%-4s %5ss  %s  %s' "$tool" "$name" "${variant:-all}" \
               "${errors:-?}" "$secs" "${cases:-no doctest summary}" "$verdict")")
  [ -f "$log.unclassified" ] && summary+=("$(cat "$log.unclassified")")
done

echo
{
  echo "gpu-sanitize at commit $commit: suites $suites${user_cases:+, cases $user_cases}, soak excluded," \
       "$max_jobs runs at a time, ${total_secs}s${resume:+, ${#resumed[@]} runs resumed from $resume}"
  printf '%-10s %-24s %-11s %-11s %6s  %s\n' tool binary "which cases" errors time "doctest summary, verdict"
  printf '%s\n' "${summary[@]}"
} | tee "$logs/table.txt"
printf '%s\n' "${planted_lines[@]}"
[ -n "$ic_note" ] && echo "$ic_note"
if [ "$prefill" = 1 ]; then
  filled=$(cat "$logs"/*.initcheck*.log 2>/dev/null |
           sed -n 's/.*EMBER_SANITIZE_PREFILL_BLAS_OUTPUTS: \([0-9]*\) cuBLAS(Lt) outputs (\([0-9]*\) bytes).*/\1 \2/p' |
           awk '{ n += $1; b += $2; r++ } END { printf "%d outputs, %.1f MB, in %d processes", n, b / 1e6, r }')
  echo "set apart (initcheck cannot see cuBLAS(Lt)'s sm90 stores; the probe above): cuBLAS(Lt) outputs pre-filled with zeros in the initcheck runs: $filled"
fi
if [ ${#set_apart[@]} -gt 0 ]; then
  echo "set apart (cuBLASLt's own, reproduced without ember by tools/cublaslt_racecheck_probe.sh):"
  printf '  %s\n' "${set_apart[@]}"
fi
[ $status -eq 0 ] && echo "gpu-sanitize: clean" || echo "gpu-sanitize: FAILURES, see $logs"
exit $status
