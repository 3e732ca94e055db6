#!/usr/bin/env bash
# Sourced by the GPU check scripts (tools/gpu_dropout_check.sh, tools/gpu_conv_check.sh)
# from the repository root, after `set -uo pipefail`: the build folder ($1, default
# build-gpu), the log folder ($OUT, or ./gpu-logs), EMBER_GPU_PREBUILT's unpacking, the
# GPU's name in gpu.txt; then the helpers below. Sets build, out and status (0).
build="${1:-build-gpu}"
out="$(realpath -m "${OUT:-gpu-logs}")"
mkdir -p "$out"
if [ -n "${EMBER_GPU_PREBUILT:-}" ]; then
  tar -xJf "$EMBER_GPU_PREBUILT" || { echo "cannot unpack $EMBER_GPU_PREBUILT"; exit 1; }
  echo "unpacked $EMBER_GPU_PREBUILT: $(cat "$build/ember_commit.txt" 2>/dev/null || echo '?')"
fi
status=0
t0=$(date +%s)  # for deadlines (ab_runs)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

# under_sanitizer TOOL COMMAND...: COMMAND under compute-sanitizer's TOOL, exit 1 on any
# report. initcheck does not see cuBLAS(Lt)'s stores (docs/gpu_sanitize.md): the test
# binaries zero their outputs first.
under_sanitizer() {
  local tool="$1"
  shift
  local env=()
  [ "$tool" = initcheck ] && env=(EMBER_SANITIZE_PREFILL_BLAS_OUTPUTS=1)
  env "${env[@]}" compute-sanitizer --tool "$tool" --error-exitcode 1 "$@"
}

# sanitizer_summary TOOL RC LOG: one line with the exit code, the tool's summaries and
# the doctest summaries; then the kernels racecheck reported hazards in, if any. A
# non-zero RC sets status to 1.
sanitizer_summary() {
  local tool="$1" rc="$2" log="$3"
  echo "$tool: exit $rc; $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$log" | tr '\n' ' ')" \
       "$(grep -E 'test cases:' "$log" | tr '\n' ' ')"
  grep -oE 'in [A-Za-z_0-9]+(nvjet|_kernel)[A-Za-z_0-9<>,: ]*' "$log" | sort | uniq -c | head -5
  [ "$rc" -eq 0 ] || status=1
}

# sanitize_four LOG_PREFIX COMMAND...: COMMAND under the four tools at once, each
# tool's log at LOG_PREFIX_TOOL.txt, then each one's sanitizer_summary.
sanitize_four() {
  local prefix="$1"
  shift
  local pids=() tool i=0
  for tool in memcheck racecheck initcheck synccheck; do
    under_sanitizer "$tool" "$@" >"${prefix}_$tool.txt" 2>&1 &
    pids+=($!)
  done
  for tool in memcheck racecheck initcheck synccheck; do
    wait "${pids[$i]}"
    sanitizer_summary "$tool" $? "${prefix}_$tool.txt"
    i=$((i + 1))
  done
}

# ab_runs DIR DEADLINE VAR A B COMMAND...: COMMAND run EMBER_COMPARE_REPS times (default 5)
# with VAR=A and VAR=B in turn, alternating processes, each run's rows in DIR/V.REP.json
# (COMMAND gets --json) and its output in DIR/V.REP.log; none starts once DEADLINE seconds
# have passed since t0. Prints the first runs' memory lines and failures, then the
# per-repetition ratios of B to A (tools/ab_table.py). A failed run sets status to 1.
ab_runs() {
  local dir="$1" deadline="$2" var="$3" a="$4" b="$5" r v
  shift 5
  mkdir -p "$dir"
  for r in $(seq "${EMBER_COMPARE_REPS:-5}"); do
    for v in "$a" "$b"; do
      if [ $(($(date +%s) - t0)) -ge "$deadline" ]; then
        echo "deadline: stopped before $v.$r"
        break 2
      fi
      env "$var=$v" "$@" --json "$dir/$v.$r.json" >"$dir/$v.$r.log" 2>&1 || status=1
    done
  done
  grep -h '^memory\|FAILED' "$dir"/*.1.log
  python3 tools/ab_table.py "$dir" "$a" "$b" || status=1
}

# finish KEEP...: under the device tool ($OUT set), every log but KEEP goes back in one
# logs.tgz (tools/gpu_logs_pack.sh); then the status line and exit.
finish() {
  [ -n "${OUT:-}" ] && tools/gpu_logs_pack.sh "$out" "$@"
  echo "status $status"
  exit "$status"
}
