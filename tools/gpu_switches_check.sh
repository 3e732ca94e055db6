#!/usr/bin/env bash
# The three faster paths that were off by default until 2026-12-06 (EMBER_TRANSPOSE_COPY,
# EMBER_ROW_COPY, EMBER_ELEMENTWISE_VECTORS; each stage sets them) measured on the GPU machine, on a build packed by
# tools/pack_gpu_build.sh (carried in .device, device tool: carry [".device"]), in two
# calls that each fit the device tool's 10 minutes:
#   tools/gpu_switches_check.sh conv   tools/gpu_transpose_check.sh (the copies' cases,
#        bench_conv A/B of the transpose, --memory, --profile, their sanitizer runs);
#        the whole suite with the three on; GPT-2 profiles (bench_gpt --profile) with
#        the three off, then on; compare.sh's conv set with the three on (5 repetitions)
#   tools/gpu_switches_check.sh gpt    bench_gpt --only gpt2 --eager with the three off
#        (0) and on (1), alternating processes, up to 5 each (tools/ab_table.py); then the
#        vector kernels' cases under compute-sanitizer's four tools
#   tools/gpu_switches_check.sh attn   the attention probe (checks, timing, the peer) with
#        the wgmma backward on by default (EMBER_ATTENTION_BWD_V2=1); bench_gpt --only gpt2
#        --eager with it off (0) and on (1), alternating; the probe's sanitize cases
#        (which include the wgmma backward) under compute-sanitizer's four tools
#   tools/gpu_switches_check.sh combo  one call for all four paths (the three above and the
#        wgmma attention backward, EMBER_ATTENTION_BWD_V2): the probe's checks, the whole
#        suite with the four on, GPT-2 eager with the four off and on, alternating, a GPT-2
#        profile with them on, compare.sh's conv set with them on
#   tools/gpu_switches_check.sh lnwarp the norm cases (the warp-per-row kernels' among them),
#        those kernels under the four sanitizers, GPT-2 eager with EMBER_LAYER_NORM_WARP 0
#        and 1, alternating
#   tools/gpu_switches_check.sh final  the whole suite at the defaults, bench_conv --memory
#        (predicted against measured peaks), GPT-2 eager with EMBER_LAYER_NORM_WARP 0 and 1,
#        alternating, while time is left
#   tools/gpu_switches_check.sh closing  the whole suite at the defaults, then
#        GPT-2's and the char GPT's steps against PyTorch's eager and compiled ones
#        (benchmarks/peer_gpt.py --interleave 5), the norm cases under the four sanitizers,
#        while time is left (EMBER_CLOSING_OURS_FLAGS=--eager: ember's eager step alone;
#        EMBER_CLOSING_RESERVE: seconds kept after the GPT runs, default 50)
#   tools/gpu_switches_check.sh ncu    ncu over one GPT-2 step's kernels outside the GEMMs
#        (layer norm, attention, cross-entropy, element-wise): duration, DRAM throughput,
#        occupancy per kernel (EMBER_NCU_COUNT launches, default 60)
#   tools/gpu_switches_check.sh qkv    the fused attention's op cases with q's, k's and v's
#        gradients in one buffer (EMBER_ATTENTION_QKV_GRAD=1), its case under the four
#        sanitizers, GPT-2 eager with the switch 0 and 1, alternating
#   tools/gpu_switches_check.sh round9 the norm and cross-entropy cases, the new cases of
#        add_layer_norm and the streamed cross-entropy under the four sanitizers,
#        bench_cross_entropy, GPT-2 eager with EMBER_ADD_LAYER_NORM and
#        EMBER_CROSS_ENTROPY_STREAM both 0, then both 1, alternating
#   tools/gpu_switches_check.sh round10 the whole suite at the defaults; bench_layer_norm (GPT-2's
#        rows with EMBER_LAYER_NORM_LEAN off and on, alternating); compare.sh's attention set
#        (bench_attention against PyTorch's sdpa, 5 repetitions); ncu over the fused
#        attention's four kernels at D 128 T 2048 and at GPT-2's shape (bench_attention
#        --only 1, --only 2): throughput, occupancy, pipes, stall reasons
#   tools/gpu_switches_check.sh round11 compare.sh's attention set (5 repetitions; 220 s kept
#        for the rest); the whole suite at the defaults; the attention probe's sanitize
#        cases (tools/attention_probe.sh --sanitize: every forward and backward version
#        under the four tools) while more than 150 s are left
#   tools/gpu_switches_check.sh round12 the attention probe's --fwd-only run (forward versions
#        5 and 6 against 4 and 2, alternating), the same binary with PROBE_BWD4=1 (backward
#        version 4's checks and timing), its sanitize cases with it, the whole suite
#   tools/gpu_switches_check.sh round12c the probe built from the tree: its checks and the
#        library's forward with backward 2, 3 and 4 alternating (PROBE_BWD4=1
#        PROBE_SKIP_FWD=1), then its sanitize cases with backward 4; with EMBER_R12C_MORE=1
#        also the pack's suite and GPT-2 eager with EMBER_ATTENTION fused and atomic
#        (backward version 4), alternating, while time is left (EMBER_R12C_COMPARE=1: first
#        compare.sh's attention set with EMBER_ATTENTION=atomic, 5 repetitions)
#   tools/gpu_switches_check.sh round12e the whole suite, then bench_attention with
#        EMBER_ATTENTION fused and atomic (backward version 4), alternating, while time is left
#   tools/gpu_switches_check.sh sanpeer tools/gpu_sanitize.sh over EMBER_SANITIZE_PART's
#        binaries (cuda, or rest: core, memory, nn, optim, parallel; no run starts after
#        EMBER_SANITIZE_DEADLINE s: by default the stage's limit less 20 s, or less 200 s
#        when a peer run follows; a whole part takes ~370 s on an H100, and a cut part is
#        no result), then benchmarks/peer_gpt.py --interleave 5 for EMBER_PEER_ONLY (gpt2
#        or char; none, the default: skipped) with EMBER_CLOSING_OURS_FLAGS
#   tools/gpu_switches_check.sh round10b GPT-2 against PyTorch (peer_gpt.py --interleave 5, ours
#        bench_gpt --only gpt2 --eager), then GPT-2 eager with EMBER_LAYER_NORM_LEAN 0 and 1,
#        alternating, while time is left
#   tools/gpu_switches_check.sh round13a the pack's wgmma backward cases (versions 2, 3, 4)
#        under compute-sanitizer's four tools, then GPT-2 eager and the char GPT eager with
#        EMBER_ATTENTION fused (0) and atomic (1: backward version 4), alternating, while
#        time is left
#   tools/gpu_switches_check.sh closing13 the parts EMBER_C13_PARTS names, in its order
#        (comma-separated): suite (the whole suite at the defaults), san-cuda and san-rest
#        (tools/gpu_sanitize.sh over ember_tests_cuda, or over core, memory, nn, optim and
#        parallel; a whole part takes ~370-450 s on an H100, and a cut part is no result),
#        attention (compare.sh's attention set at the defaults, 5 repetitions), gpt2 and
#        char (benchmarks/peer_gpt.py --interleave 5 against bench_gpt --eager),
#        gpt2-graphed and char-graphed (the same against bench_gpt's eager and graphed
#        rows), torch-profile-char and torch-profile-gpt2 (peer_gpt.py --profile: PyTorch's
#        compiled step's kernels by device time), profile-char and profile-gpt2
#        (bench_gpt --profile --steps 3: ember's profiler table, device time by op),
#        kernels-char and kernels-gpt2 (ncu's duration of every kernel of one bench_gpt
#        step, summed by kernel: tools/kernel_times.py), cases-new (the attention and
#        index cases of ember_tests_cuda), char-att-ab (bench_gpt --only char with attention
#        dropout on version 1's kernels and on version 2's, alternating), san-new (the
#        attention dropout, index and dropout cases under the four sanitizers),
#        char-dal-ab (bench_gpt --only char with the blocks' dropouts on their own and
#        inside the norms, alternating), char-new-ab (the same without and with both of
#        the sixteenth session's step changes: EMBER_DROPOUT_ADD_LAYER_NORM and
#        EMBER_CAST_PARAMETERS), cases-dal (the dropout, layer norm, graph, clipping and
#        Adam cases of ember_tests_cuda, and autocast's and dropout's CUDA cases of
#        ember_tests_core), san-dal (those kernels' cases under the four sanitizers),
#        issue28 (benchmarks/compare.sh's issue28 set, 5 repetitions: issue 28's targets
#        but the GPT steps'; 204 s on an H100 in the twenty-first session), memory
#        (bench_gpt --memory: predict_memory's peaks against the GPU's, both GPT steps)
#   EMBER_C13_SAN_RESUME=DIR           closing13's san-cuda and san-rest: the clean runs of
#                                      DIR/san-cuda and DIR/san-rest (an earlier call's logs
#                                      of the same pack, each with its table.txt) are taken,
#                                      not run again (EMBER_GPU_SANITIZE_RESUME); a part
#                                      with no DIR/PART/table.txt runs whole
#   EMBER_C13_SAN_KEEP=DIR             closing13's san parts also copy their logs to
#                                      DIR/PART (on the GPU machine: a later call on the
#                                      same warm machine resumes from there)
#   EMBER_SWITCHES_LIMIT=540           seconds the stage may take; each part starts only
#                                      with time left for it
#   EMBER_GPU_PREBUILT=.device/bg.tar.xz  the pack (unpacked unless build-gpu already holds
#                                      the commit .device/commit.txt names)
# At most 8 files come back from $OUT (the device tool's limit): the tables and summaries
# stay at its top, every other log goes into $OUT/more.tgz.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
stage="${1:-conv}"
limit=${EMBER_SWITCHES_LIMIT:-540}
t0=$(date +%s)
left() { echo $((limit - ($(date +%s) - t0))); }
out="$(realpath -m "${OUT:-gpu-logs}")"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
# shellcheck source=tools/gpu_setup.sh
. tools/gpu_setup.sh
pack="${EMBER_GPU_PREBUILT:-.device/bg.tar.xz}"
if [ "$(cat build-gpu/ember_commit.txt 2>/dev/null)" != "$(cat .device/commit.txt 2>/dev/null)" ]; then
  tar -xJf "$pack" || { echo "cannot unpack $pack"; exit 1; }
  ember_fix_ctest_interpreters build-gpu
fi
echo "build-gpu: $(cat build-gpu/ember_commit.txt) ($(($(date +%s) - t0)) s)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader |
  tee "$out/gpu.txt"
# on3 V COMMAND...: COMMAND with the three switches at V. set1 VAR V COMMAND...: with VAR=V.
on3() { EMBER_TRANSPOSE_COPY=$1 EMBER_ROW_COPY=$1 EMBER_ELEMENTWISE_VECTORS=$1 "${@:2}"; }
set1() { env "$1=$2" "${@:3}"; }

# suite SETTER...: the whole suite with SETTER... 1 (ctest, then tools/test_summary.sh
# into suite_summary.txt).
suite() {
  (cd build-gpu && "$@" 1 timeout 210 ctest -j8 -E '^package_consumer$' \
    -O Testing/Temporary/LastTestConsole.log >"$out/ctest.txt" 2>&1)
  tail -3 "$out/ctest.txt"
  tools/test_summary.sh build-gpu 2>&1 | tail -25 | tee "$out/suite_summary.txt"
  grep -B2 -A12 'ERROR\|FAILED' build-gpu/Testing/Temporary/LastTest.log | head -80 \
    >>"$out/suite_summary.txt"
}

# bench_ab DIR RESERVE SETTER... -- COMMAND...: COMMAND (a benchmark taking --json) with
# SETTER... 0 and 1 in alternating processes (70 s each at most), up to 5 each while
# more than RESERVE seconds are left, then tools/ab_table.py's rows.
bench_ab() {
  local dir="$out/$1" reserve=$2 r v setter=()
  shift 2
  while [ "$1" != -- ]; do setter+=("$1"); shift; done
  shift
  mkdir -p "$dir"
  for r in 1 2 3 4 5; do
    for v in 0 1; do
      [ "$(left)" -gt "$reserve" ] || break 2
      "${setter[@]}" "$v" timeout 70 "$@" --json "$dir/$v.$r.json" >"$dir/$v.$r.log" 2>&1 ||
        echo "$(basename "$1") $v.$r failed"
    done
  done
  grep -h 'FAILED\|mismatch' "$dir"/*.log | head -10
  python3 tools/ab_table.py "$dir" 0 1
}

# gpt_ab DIR RESERVE SETTER...: bench_ab with bench_gpt --only gpt2 --eager.
gpt_ab() {
  local dir=$1 reserve=$2
  shift 2
  bench_ab "$dir" "$reserve" "$@" -- build-gpu/benchmarks/bench_gpt --only gpt2 --eager
}

# set_att V COMMAND...: COMMAND with EMBER_ATTENTION fused (V 0) or atomic (V 1: the
# backward's atomic dQ).
set_att() { env "EMBER_ATTENTION=$([ "$1" = 1 ] && echo atomic || echo fused)" "${@:2}"; }

# set_dwg V COMMAND...: COMMAND with attention dropout on version 1's kernels (V 0, the
# default) or version 2's wgmma kernels (V 1: EMBER_ATTENTION_DROPOUT_WGMMA=1).
set_dwg() { env "EMBER_ATTENTION_DROPOUT_WGMMA=$1" "${@:2}"; }

# set_dal V COMMAND...: COMMAND with the blocks' dropouts as their own kernels (V 0:
# EMBER_DROPOUT_ADD_LAYER_NORM=0) or drawn inside the norms (V 1, the default).
set_dal() { env "EMBER_DROPOUT_ADD_LAYER_NORM=$1" "${@:2}"; }

# set_new V COMMAND...: COMMAND without (V 0) or with (V 1, the defaults) the sixteenth
# session's two step changes: the dropouts inside the norms, and the blocks' weights
# cast in one launch (EMBER_DROPOUT_ADD_LAYER_NORM, EMBER_CAST_PARAMETERS).
set_new() { env "EMBER_DROPOUT_ADD_LAYER_NORM=$1" "EMBER_CAST_PARAMETERS=$1" "${@:2}"; }

# compare_attention SECONDS SUMMARY [VAR=VALUE...]: compare.sh's attention set (5
# repetitions, the pack's binaries, no libtorch) with VAR=VALUE... set, stopped after
# SECONDS; the table into $out/attention_results.md, the exit status and any error lines
# appended to SUMMARY.
compare_attention() {
  local seconds=$1 summary=$2
  shift 2
  env "$@" EMBER_COMPARE_REPS=5 EMBER_BENCH_BUILD=build-gpu EMBER_BENCH_PREBUILT=1 \
    EMBER_LIBTORCH=none EMBER_COMPARE_SET=attention timeout "$seconds" \
    benchmarks/compare.sh "$out/att" >"$out/att.txt" 2>&1
  echo "compare.sh exit status $?" | tee -a "$summary"
  cp "$out/att/RESULTS.md" "$out/attention_results.md" 2>/dev/null
  grep -E 'FAILED|failed|error' "$out/att.txt" | head -10 | tee -a "$summary"
}

# sanitize4 PREFIX SECONDS COMMAND...: COMMAND under compute-sanitizer's four tools at
# once (logs PREFIX_TOOL.txt), then a line per tool: its summary and the run's verdict.
sanitize4() {
  local prefix=$1 limit=$2 tool
  shift 2
  for tool in memcheck racecheck initcheck synccheck; do
    timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" \
      >"${prefix}_$tool.txt" 2>&1 &
  done
  wait
  for tool in memcheck racecheck initcheck synccheck; do
    echo "$tool: $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "${prefix}_$tool.txt" |
      tr '\n' ' ') $(grep -E 'test cases:|ALL PASS|failed case' "${prefix}_$tool.txt" | tail -1)"
  done
}

# compare_conv SETTER...: compare.sh's conv set with SETTER... 1, 5 repetitions.
compare_conv() {
  "$@" 1 env EMBER_COMPARE_REPS=5 EMBER_BENCH_BUILD=build-gpu EMBER_BENCH_PREBUILT=1 \
    EMBER_COMPARE_SET=conv timeout $(($(left) - 15)) benchmarks/compare.sh "$out/cmp" \
    >"$out/cmp.txt" 2>&1
  cat "$out/cmp/RESULTS.md" >>"$out/cmp.txt" 2>/dev/null
  tail -70 "$out/cmp.txt"
}

if [ "$stage" = conv ]; then
  echo "=== tools/gpu_transpose_check.sh ($(left) s left)"
  mkdir -p "$out/tc"
  OUT="$out/tc" EMBER_TRANSPOSE_DEADLINE=${EMBER_TRANSPOSE_DEADLINE:-120} timeout 280 \
    tools/gpu_transpose_check.sh build-gpu >"$out/tc.txt" 2>&1
  grep -v '^\s*$' "$out/tc.txt" | head -120

  echo "=== the whole suite, the three on ($(left) s left)"
  suite on3

  echo "=== GPT-2 profiles: the three off, then on ($(left) s left)"
  for v in 0 1; do
    [ "$(left)" -gt 150 ] || break
    on3 "$v" timeout 60 build-gpu/benchmarks/bench_gpt --profile --only gpt2 --steps 3 \
      >"$out/gpt_profile$v.txt" 2>&1
    head -50 "$out/gpt_profile$v.txt"
  done

  echo "=== compare.sh conv, the three on, 5 repetitions ($(left) s left)"
  if [ "$(left)" -gt 100 ]; then compare_conv on3; fi
  keep=(gpu.txt tc.txt suite_summary.txt gpt_profile0.txt gpt_profile1.txt cmp.txt)
elif [ "$stage" = gpt ]; then
  echo "=== GPT-2 eager, the three off (0) and on (1), alternating ($(left) s left)"
  gpt_ab gab "${EMBER_SWITCHES_RESERVE:-100}" on3 | tee "$out/gpt_ab.txt"
  echo "=== the vector cases under the four sanitizers ($(left) s left)"
  if [ "$(left)" -gt 40 ]; then
    sanitize4 "$out/gab/san" $(($(left) - 10)) env EMBER_ELEMENTWISE_VECTORS=1 \
      build-gpu/tests/ember_tests_cuda -tc='kernels/elementwise*' | tee -a "$out/gpt_ab.txt"
  fi
  keep=(gpu.txt gpt_ab.txt)
elif [ "$stage" = attn ]; then
  echo "=== tools/attention_probe.sh: checks, timing, the peer, with EMBER_ATTENTION_BWD_V2=1 ($(left) s left)"
  EMBER_ATTENTION_BWD_V2=1 PROBE_REPS=${PROBE_REPS:-10} OUT=/tmp/attn_probe \
    timeout $(($(left) > 400 ? 300 : $(left) / 2)) bash tools/attention_probe.sh >"$out/probe_full.txt" 2>&1
  echo "probe exit status $?"
  cp /tmp/attn_probe/probe.log /tmp/attn_probe/peer.log /tmp/attn_probe/ptxas_summary.txt "$out/" 2>/dev/null
  sed -n '/== summary/,$p' "$out/probe_full.txt" | cut -c1-240 | tee "$out/attn_summary.txt"
  grep -E 'bwd-v2' "$out/probe_full.txt" | grep -c PASS | sed 's/^/cases with bwd-v2 passing: /' |
    tee -a "$out/attn_summary.txt"
  grep -E 'FAIL' "$out/probe_full.txt" | head -10 | tee -a "$out/attn_summary.txt"
  echo "=== GPT-2 eager, EMBER_ATTENTION_BWD_V2 0 and 1, alternating ($(left) s left)"
  gpt_ab vab "${EMBER_SWITCHES_RESERVE:-130}" set1 EMBER_ATTENTION_BWD_V2 | tee "$out/gpt_v2_ab.txt"
  echo "=== attention_probe --sanitize under the four tools ($(left) s left)"
  if [ "$(left)" -gt 40 ]; then
    sanitize4 "$out/vab/san" $(($(left) - 10)) /tmp/attn_probe/attention_probe --sanitize |
      tee -a "$out/attn_summary.txt"
  fi
  keep=(gpu.txt attn_summary.txt gpt_v2_ab.txt probe.log peer.log ptxas_summary.txt)
elif [ "$stage" = combo ]; then
  # Everything in one call, for sessions that may get only one: the four off-by-default
  # paths (the three copies and vectors, the wgmma attention backward) together.
  on4() { EMBER_ATTENTION_BWD_V2=$1 on3 "$@"; }
  echo "=== attention probe --check-only (wgmma backward v2, pipelined forward v3) ($(left) s left)"
  OUT=/tmp/attn_probe timeout 150 bash tools/attention_probe.sh --check-only >"$out/probe_check.txt" 2>&1
  echo "probe exit status $?"
  { grep -E 'ALL PASS|FAIL|EXCEPTION' "$out/probe_check.txt" | cut -c1-300 | tail -12
    echo "cases with bwd-v2 passing: $(grep -E 'bwd-v2' "$out/probe_check.txt" | grep -c 'PASS$')"
    grep -E 'attn_(bwd_dkdv|bwd_dq|fwd)_sm90' /tmp/attn_probe/ptxas_summary.txt; } |
    tee "$out/combo_summary.txt"
  echo "=== the whole suite, the four on ($(left) s left)"
  suite on4 | tail -28 | tee -a "$out/combo_summary.txt"
  echo "=== GPT-2 eager, the four off (0) and on (1), alternating ($(left) s left)"
  gpt_ab gab "${EMBER_SWITCHES_RESERVE:-200}" on4 | tee "$out/gpt_ab.txt"
  echo "=== GPT-2 profile, the four on ($(left) s left)"
  if [ "$(left)" -gt 170 ]; then
    on4 1 timeout 60 build-gpu/benchmarks/bench_gpt --profile --only gpt2 --steps 3 \
      >"$out/gpt_profile1.txt" 2>&1
    head -45 "$out/gpt_profile1.txt"
  fi
  echo "=== compare.sh conv, the four on, 5 repetitions ($(left) s left)"
  if [ "$(left)" -gt 90 ]; then compare_conv on4; fi
  keep=(gpu.txt combo_summary.txt suite_summary.txt gpt_ab.txt gpt_profile1.txt cmp.txt)
elif [ "$stage" = lnwarp ]; then
  echo "=== the norm cases with the warp-per-row kernels, then their sanitizer runs ($(left) s left)"
  timeout 120 build-gpu/tests/ember_tests_cuda -tc='kernels/norm*,kernels/layer_norm*,kernels/rms_norm*' \
    >"$out/ln_cases.txt" 2>&1
  grep -E 'test cases:|FAILED|ERROR' "$out/ln_cases.txt" | head -20 | tee "$out/ln_summary.txt"
  sanitize4 "$out/ln_san" 150 build-gpu/tests/ember_tests_cuda -tc='kernels/norm: a warp per row*' |
    tee -a "$out/ln_summary.txt"
  echo "=== GPT-2 eager, EMBER_LAYER_NORM_WARP 0 and 1, alternating ($(left) s left)"
  gpt_ab lab "${EMBER_SWITCHES_RESERVE:-60}" set1 EMBER_LAYER_NORM_WARP | tee -a "$out/ln_summary.txt"
  keep=(gpu.txt ln_summary.txt)
elif [ "$stage" = final ]; then
  echo "=== the whole suite at the defaults ($(left) s left)"
  suite set1 EMBER_SUITE_AT_DEFAULTS | tail -28 | tee "$out/final_summary.txt"
  echo "=== bench_conv --memory ($(left) s left)"
  timeout 90 build-gpu/benchmarks/bench_conv --memory >"$out/conv_memory.txt" 2>&1
  echo "bench_conv --memory exit status $?" | tee -a "$out/final_summary.txt"
  tail -6 "$out/conv_memory.txt" | tee -a "$out/final_summary.txt"
  echo "=== GPT-2 eager, EMBER_LAYER_NORM_WARP 0 and 1, alternating ($(left) s left)"
  gpt_ab lab "${EMBER_SWITCHES_RESERVE:-20}" set1 EMBER_LAYER_NORM_WARP | tee "$out/ln_ab.txt"
  keep=(gpu.txt final_summary.txt suite_summary.txt conv_memory.txt ln_ab.txt)
elif [ "$stage" = closing ]; then
  echo "=== the whole suite at the defaults ($(left) s left)"
  suite set1 EMBER_SUITE_AT_DEFAULTS | tail -28 | tee "$out/closing_summary.txt"
  for w in gpt2 char; do
    echo "=== $w: PyTorch eager and torch.compile against bench_gpt, interleaved ($(left) s left)"
    [ "$(left)" -gt 200 ] || { echo "(no time left for $w)"; break; }
    timeout $(($(left) - ${EMBER_CLOSING_RESERVE:-50})) python3 benchmarks/peer_gpt.py --only $w \
      --interleave 5 --ours "build-gpu/benchmarks/bench_gpt --only $w ${EMBER_CLOSING_OURS_FLAGS:-}" \
      >"$out/gpt_vs_torch_$w.txt" 2>&1
    echo "exit status $?" >>"$out/gpt_vs_torch_$w.txt"
    tail -12 "$out/gpt_vs_torch_$w.txt"
  done
  echo "=== the norm cases under the four sanitizers ($(left) s left)"
  if [ "$(left)" -gt 25 ]; then
    sanitize4 "$out/ln_san" $(($(left) - 10)) build-gpu/tests/ember_tests_cuda -tc='kernels/norm*' |
      tee -a "$out/closing_summary.txt"
  fi
  keep=(gpu.txt closing_summary.txt suite_summary.txt gpt_vs_torch_gpt2.txt gpt_vs_torch_char.txt)
elif [ "$stage" = ncu ]; then
  # One GPT-2 step's kernels outside the GEMMs, under ncu: the layer norms (the warp-per-row
  # kernels and the column sums), the fused attention forward and backward, the
  # cross-entropy kernels and the element-wise ones, the first EMBER_NCU_COUNT launches
  # matching (default 60), with the sections that say what bounds each: throughput
  # against the peaks, occupancy, warp stalls, memory traffic. ncu locks the clocks, so
  # durations are longer than in timed runs: compare kernels with each other, not with
  # the timed step.
  echo "=== ncu over bench_gpt --profile --only gpt2 --steps 1 ($(left) s left)"
  timeout $(($(left) - 20)) ncu --target-processes all \
    --kernel-name "regex:layer_norm|column_sum|attn_|cross_entropy|elementwise|cast_kernel|gelu" \
    --launch-count "${EMBER_NCU_COUNT:-60}" --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
    --csv --page details build-gpu/benchmarks/bench_gpt --profile --only gpt2 --steps 1 \
    >"$out/ncu.csv" 2>"$out/ncu_stderr.txt"
  echo "ncu exit status $?" | tee "$out/ncu_summary.txt"
  tail -5 "$out/ncu_stderr.txt" | tee -a "$out/ncu_summary.txt"
  # Per kernel: its duration, DRAM throughput, achieved occupancy and memory throughput.
  python3 - "$out/ncu.csv" <<'PY' | tee -a "$out/ncu_summary.txt"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Name" in r), None)
if head is None:
    sys.exit("no ncu table")
h = rows[head]
k, m, v, u = (h.index(c) for c in ("Kernel Name", "Metric Name", "Metric Value", "Metric Unit"))
ids = h.index("ID")
want = ("Duration", "DRAM Throughput", "Memory Throughput", "Achieved Occupancy",
        "Registers Per Thread", "Compute (SM) Throughput")
seen = {}
for r in rows[head + 1:]:
    if len(r) > max(k, m, v, u) and r[m] in want:
        base = r[k].replace("(anonymous namespace)::", "").split("(")[0].split("<")[0].split("::")[-1].replace("void ", "")
        seen.setdefault((r[ids], base), {})[r[m]] = f"{r[v]} {r[u]}"
for (i, name), got in seen.items():
    print(i, name, "; ".join(f"{w}: {got[w]}" for w in want if w in got))
PY
  keep=(gpu.txt ncu_summary.txt ncu.csv)
elif [ "$stage" = qkv ]; then
  echo "=== the fused attention's op cases, EMBER_ATTENTION_QKV_GRAD=1 ($(left) s left)"
  EMBER_ATTENTION_QKV_GRAD=1 timeout 120 build-gpu/tests/ember_tests_cuda \
    -tc='ops/fused_attention*' >"$out/qkv_cases.txt" 2>&1
  grep -E 'test cases:|ERROR|FAILED' "$out/qkv_cases.txt" | head -20 | tee "$out/qkv_summary.txt"
  echo "=== the one-buffer case under the four sanitizers ($(left) s left)"
  # (doctest's -tc splits at commas: the case is named by its comma-free tail.)
  sanitize4 "$out/qkv_san" 150 build-gpu/tests/ember_tests_cuda \
    -tc='*one gradient buffer*' | tee -a "$out/qkv_summary.txt"
  echo "=== GPT-2 eager, EMBER_ATTENTION_QKV_GRAD 0 and 1, alternating ($(left) s left)"
  gpt_ab qab "${EMBER_SWITCHES_RESERVE:-20}" set1 EMBER_ATTENTION_QKV_GRAD | tee -a "$out/qkv_summary.txt"
  keep=(gpu.txt qkv_summary.txt)
elif [ "$stage" = round9 ]; then
  # The ninth session's two changes in one call: add_layer_norm (EMBER_ADD_LAYER_NORM) and
  # the streamed cross-entropy rows (EMBER_CROSS_ENTROPY_STREAM).
  echo "=== the norm and cross-entropy cases; add_layer_norm's CPU and meta ones ($(left) s left)"
  timeout 150 build-gpu/tests/ember_tests_cuda -tc='kernels/*norm*,kernels/cross_entropy*' \
    >"$out/r9_cases.txt" 2>&1
  timeout 60 build-gpu/tests/ember_tests_core -tc='*add_layer_norm*' >>"$out/r9_cases.txt" 2>&1
  grep -E 'test cases:|ERROR|FAILED' "$out/r9_cases.txt" | head -30 | tee "$out/r9_summary.txt"
  echo "=== the two new CUDA cases under the four sanitizers ($(left) s left)"
  sanitize4 "$out/r9_ln" 140 build-gpu/tests/ember_tests_cuda \
    -tc='*residual add in the same pass*' >"$out/r9_ln.txt" &
  sanitize4 "$out/r9_ce" 140 build-gpu/tests/ember_tests_cuda \
    -tc='*streamed rows agree*' >"$out/r9_ce.txt" &
  wait
  sed 's/^/add_layer_norm /' "$out/r9_ln.txt" | tee -a "$out/r9_summary.txt"
  sed 's/^/streamed ce /' "$out/r9_ce.txt" | tee -a "$out/r9_summary.txt"
  echo "=== bench_cross_entropy: the kernel's shapes and the op ($(left) s left)"
  timeout 90 build-gpu/benchmarks/bench_cross_entropy --json "$out/ce.json" >"$out/ce.txt" 2>&1
  grep -E 'validate|FAILED|GB/s|ce fused|op' "$out/ce.txt" | head -30 | tee -a "$out/r9_summary.txt"
  echo "=== GPT-2 eager, both switches 0 and 1, alternating ($(left) s left)"
  set2() { env "EMBER_ADD_LAYER_NORM=$1" "EMBER_CROSS_ENTROPY_STREAM=$1" "${@:2}"; }
  gpt_ab r9ab "${EMBER_SWITCHES_RESERVE:-10}" set2 | tee -a "$out/r9_summary.txt"
  keep=(gpu.txt r9_summary.txt ce.txt)
elif [ "$stage" = round10 ]; then
  echo "=== the whole suite at the defaults ($(left) s left)"
  suite set1 EMBER_SUITE_AT_DEFAULTS | tail -28 | tee "$out/r10_summary.txt"
  echo "=== bench_layer_norm: EMBER_LAYER_NORM_LEAN off and on at GPT-2's rows ($(left) s left)"
  timeout 120 build-gpu/benchmarks/bench_layer_norm --json "$out/ln.json" >"$out/ln.txt" 2>&1
  echo "bench_layer_norm exit status $?" | tee -a "$out/r10_summary.txt"
  grep -E 'validate|FAILED|lean|16384x768' "$out/ln.txt" | cut -c1-200 | tee -a "$out/r10_summary.txt"
  echo "=== compare.sh attention, 5 repetitions ($(left) s left)"
  if [ "$(left)" -gt 200 ]; then
    compare_attention $(($(left) - 90)) "$out/r10_summary.txt"
    tail -40 "$out/attention_results.md" 2>/dev/null
  fi
  # ncu: the causal check's four kernels (forward, delta, dK/dV, dQ) of shape I, with the
  # stall reasons as warp cycles per issued instruction.
  stalls=""
  for r in long_scoreboard short_scoreboard wait barrier math_pipe_throttle mio_throttle \
    lg_throttle not_selected selected no_instruction dispatch_stall sleeping membar \
    branch_resolving drain misc tex_throttle imc_miss; do
    stalls+="${stalls:+,}smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  for shape in 1 2; do
    echo "=== ncu: the attention kernels, bench_attention --only $shape ($(left) s left)"
    [ "$(left)" -gt 45 ] || break
    timeout $(($(left) - 10)) ncu --kernel-name "regex:attn_" --launch-count 4 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy \
      --section WarpStateStats --section LaunchStats --metrics "$stalls" \
      build-gpu/benchmarks/bench_attention --only $shape >"$out/ncu_attn_$shape.txt" 2>&1
    echo "ncu exit status $?" >>"$out/ncu_attn_$shape.txt"
    grep -E 'attn_.*(Context|Device)|Duration|Compute \(SM\) Throughput|DRAM Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per Thread|Warp Cycles Per Issued|Grid Size|Block Size|stalled|exit status' \
      "$out/ncu_attn_$shape.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
      tr -s ' ' | tee -a "$out/ncu_attn.txt" | head -80
  done
  keep=(gpu.txt r10_summary.txt suite_summary.txt ln.txt attention_results.md ncu_attn.txt)
elif [ "$stage" = round11 ]; then
  echo "=== compare.sh attention, 5 repetitions ($(left) s left)"
  : >"$out/r11_summary.txt"
  compare_attention $(($(left) - 220)) "$out/r11_summary.txt"
  tail -40 "$out/attention_results.md" 2>/dev/null
  echo "=== the whole suite at the defaults ($(left) s left)"
  suite set1 EMBER_SUITE_AT_DEFAULTS | tail -28 | tee -a "$out/r11_summary.txt"
  echo "=== the attention probe's sanitize cases under the four tools ($(left) s left)"
  if [ "$(left)" -gt 150 ]; then
    OUT="$out/probe" timeout $(($(left) - 10)) bash tools/attention_probe.sh --sanitize \
      >"$out/probe_sanitize.txt" 2>&1
    echo "attention_probe.sh --sanitize exit status $?" | tee -a "$out/r11_summary.txt"
    grep -E 'SUMMARY|exit status|FAIL|ALL PASS' "$out/probe_sanitize.txt" | tee -a "$out/r11_summary.txt"
  fi
  keep=(gpu.txt r11_summary.txt suite_summary.txt attention_results.md probe_sanitize.txt att.txt)
elif [ "$stage" = round12 ]; then
  # The experimental forwards 5 and 6 and backward 4 (first GPU run): the probe's checks
  # and its alternating timings (v5 against v4, v6 against v2) without backward 4, then the
  # same binary again with it (checks, and v4 against v2 and 3 after the default forward),
  # its sanitize cases with backward 4, then the suite.
  echo "=== attention_probe.sh --fwd-only ($(left) s left)"
  # At most 250 s: versions 5 and 6 have never run, and a hang must leave time for the rest.
  t=$(($(left) - 300)); [ "$t" -gt 250 ] && t=250
  PROBE_REPS=20 OUT="$out/probe" timeout "$t" bash tools/attention_probe.sh \
    --fwd-only >"$out/probe_fwd.txt" 2>&1
  echo "attention_probe.sh --fwd-only exit status $?" | tee "$out/r12_summary.txt"
  grep -E 'FAIL|EXCEPTION|C75' "$out/probe_fwd.txt" | head -5 | tee -a "$out/r12_summary.txt"
  grep -E '^TIME' "$out/probe/probe.log" | cut -c1-260 | tee -a "$out/r12_summary.txt"
  echo "=== the probe again with backward version 4 ($(left) s left)"
  if [ -x "$out/probe/attention_probe" ] && [ "$(left)" -gt 300 ]; then
    PROBE_BWD4=1 PROBE_REPS=20 timeout 150 "$out/probe/attention_probe" --fwd-only \
      >"$out/probe_bwd4.txt" 2>&1
    echo "attention_probe (PROBE_BWD4=1) exit status $?" | tee -a "$out/r12_summary.txt"
    grep -E 'FAIL|EXCEPTION|error' "$out/probe_bwd4.txt" | cut -c1-400 | head -5 |
      tee -a "$out/r12_summary.txt"
    grep -E '^TIME' "$out/probe_bwd4.txt" | cut -c1-260 | tee -a "$out/r12_summary.txt"
  fi
  echo "=== the attention probe's sanitize cases ($(left) s left)"
  if [ -x "$out/probe/attention_probe" ] && [ "$(left)" -gt 230 ]; then
    PROBE_BWD4=1 PROBE_PREBUILT=1 OUT="$out/probe" timeout 120 bash tools/attention_probe.sh \
      --sanitize >"$out/probe_sanitize.txt" 2>&1
    echo "attention_probe.sh --sanitize exit status $?" | tee -a "$out/r12_summary.txt"
    grep -E 'SUMMARY|exit status|FAIL' "$out/probe_sanitize.txt" | tee -a "$out/r12_summary.txt"
  fi
  echo "=== the whole suite at the defaults ($(left) s left)"
  [ "$(left)" -gt 200 ] && suite set1 EMBER_SUITE_AT_DEFAULTS | tail -28 | tee -a "$out/r12_summary.txt"
  keep=(gpu.txt r12_summary.txt suite_summary.txt probe_fwd.txt probe_bwd4.txt probe_sanitize.txt)
elif [ "$stage" = round12c ]; then
  # Backward version 4 after its barrier fix: the probe built from the tree, its checks
  # (every version, backward 4 among them) and the library's forward + backward 2, 3 and 4
  # alternating (no forward rounds), then its sanitize cases with backward 4.
  echo "=== attention_probe.sh --build-only ($(left) s left)"
  OUT="$out/probe" timeout 150 bash tools/attention_probe.sh --build-only >"$out/probe_build.txt" 2>&1
  echo "build exit status $?" | tee "$out/r12c_summary.txt"
  grep -E 'dkdv.*(Lb1ELb1|Lb0ELb1)|C75' "$out/probe/ptxas_summary.txt" | tee -a "$out/r12c_summary.txt"
  echo "=== the probe: checks, backward 2, 3, 4 ($(left) s left)"
  t=$(($(left) - 150)); [ "$t" -gt 150 ] && t=150
  PROBE_BWD4=1 PROBE_SKIP_FWD=1 PROBE_REPS=20 timeout "$t" \
    "$out/probe/attention_probe" --fwd-only >"$out/probe_bwd4.txt" 2>&1
  echo "attention_probe (PROBE_BWD4=1 PROBE_SKIP_FWD=1) exit status $?" | tee -a "$out/r12c_summary.txt"
  grep -E 'FAIL|EXCEPTION|error' "$out/probe_bwd4.txt" | cut -c1-300 | head -5 |
    tee -a "$out/r12c_summary.txt"
  grep -E '^TIME' "$out/probe_bwd4.txt" | cut -c1-260 | tee -a "$out/r12c_summary.txt"
  echo "=== the probe's sanitize cases with backward 4 ($(left) s left)"
  t=$(($(left) - 10)); [ "$t" -gt 130 ] && t=130
  PROBE_BWD4=1 PROBE_PREBUILT=1 OUT="$out/probe" timeout "$t" bash \
    tools/attention_probe.sh --sanitize >"$out/probe_sanitize.txt" 2>&1
  echo "attention_probe.sh --sanitize exit status $?" | tee -a "$out/r12c_summary.txt"
  grep -E 'SUMMARY|exit status|FAIL' "$out/probe_sanitize.txt" | tee -a "$out/r12c_summary.txt"
  keep=(gpu.txt r12c_summary.txt probe_bwd4.txt probe_sanitize.txt)
  if [ "${EMBER_R12C_MORE:-0}" = 1 ]; then
    # The pack's suite, then GPT-2 eager with EMBER_ATTENTION fused (0) and atomic (1:
    # backward version 4), alternating, while time is left.
    echo "=== the whole suite at the defaults ($(left) s left)"
    [ "$(left)" -gt 200 ] && suite set1 EMBER_SUITE_AT_DEFAULTS | tail -28 | tee -a "$out/r12c_summary.txt"
    if [ "${EMBER_R12C_COMPARE:-0}" = 1 ] && [ "$(left)" -gt 150 ]; then
      echo "=== compare.sh attention with EMBER_ATTENTION=atomic (backward version 4) ($(left) s left)"
      t=$(($(left) - 40)); [ "$t" -gt 200 ] && t=200
      compare_attention "$t" "$out/r12c_summary.txt" EMBER_ATTENTION=atomic
      keep+=(attention_results.md)
    fi
    echo "=== GPT-2 eager, EMBER_ATTENTION fused (0) and atomic (1), alternating ($(left) s left)"
    gpt_ab att_ab "${EMBER_SWITCHES_RESERVE:-25}" set_att | tee -a "$out/r12c_summary.txt"
    grep -h 'predict_memory' "$out"/att_ab/*.1.log | head -4 | tee -a "$out/r12c_summary.txt"
    keep+=(suite_summary.txt)
  fi
elif [ "$stage" = round13a ]; then
  # Is backward version 4 (the atomic dQ) worth the default at head dim 64? Its cases
  # under the four tools first (initcheck never ran on its fixed form), then both GPT
  # steps with EMBER_ATTENTION fused and atomic in alternating processes.
  echo "=== the wgmma backward cases under the four sanitizers ($(left) s left)"
  sanitize4 "$out/san_bwd" 150 build-gpu/tests/ember_tests_cuda -tc='*wgmma backward*' |
    tee "$out/r13a_summary.txt"
  echo "=== GPT-2 eager, EMBER_ATTENTION fused (0) and atomic (1), alternating ($(left) s left)"
  gpt_ab att_ab 110 set_att | tee -a "$out/r13a_summary.txt"
  grep -h 'predict_memory' "$out"/att_ab/*.1.log | head -4 | tee -a "$out/r13a_summary.txt"
  echo "=== char eager, EMBER_ATTENTION fused (0) and atomic (1), alternating ($(left) s left)"
  bench_ab att_char 25 set_att -- build-gpu/benchmarks/bench_gpt --only char --eager |
    tee -a "$out/r13a_summary.txt"
  keep=(gpu.txt r13a_summary.txt)
elif [ "$stage" = closing13 ]; then
  # The closing evidence on one pack, in parts that fit the device tool's calls.
  sum="$out/c13_summary.txt"
  : >"$sum"
  keep=(gpu.txt c13_summary.txt)
  IFS=, read -r -a parts <<<"${EMBER_C13_PARTS:-suite}"
  for part in "${parts[@]}"; do
    echo "=== $part ($(left) s left)" | tee -a "$sum"
    case "$part" in
      suite)
        suite set1 EMBER_SUITE_AT_DEFAULTS | tail -28 | tee -a "$sum"
        keep+=(suite_summary.txt)
        ;;
      san-cuda | san-rest)
        only=cuda
        [ "$part" = san-rest ] && only=core,memory,nn,optim,parallel
        resume_dir=""
        if [ -f "${EMBER_C13_SAN_RESUME:-/nonexistent}/$part/table.txt" ]; then
          resume_dir="$EMBER_C13_SAN_RESUME/$part"
        elif [ -n "${EMBER_C13_SAN_RESUME:-}" ]; then
          echo "no $EMBER_C13_SAN_RESUME/$part/table.txt: $part runs whole" | tee -a "$sum"
        fi
        EMBER_COMMIT=$(cat build-gpu/ember_commit.txt) EMBER_GPU_SANITIZE_ONLY=$only \
          EMBER_GPU_SANITIZE_JOBS=16 EMBER_GPU_SANITIZE_SHARD=3 \
          EMBER_GPU_SANITIZE_DEADLINE=$(($(left) - ${EMBER_C13_AFTER_SANITIZE:-15})) \
          EMBER_GPU_SANITIZE_RESUME="$resume_dir" \
          EMBER_GPU_SANITIZE_PROBE=1 tools/gpu_sanitize.sh build-gpu >"$out/$part.txt" 2>&1
        echo "gpu_sanitize ($only) exit status $?" | tee -a "$sum"
        grep -v '^gpu-sanitize: \(memcheck\|racecheck\|initcheck\|synccheck\) on ' \
          "$out/$part.txt" | tail -40 | tee -a "$sum"
        cp -r build-gpu/gpu-sanitize "$out/${part}_logs" 2>/dev/null
        if [ -n "${EMBER_C13_SAN_KEEP:-}" ]; then  # for a later call's EMBER_C13_SAN_RESUME
          rm -rf "${EMBER_C13_SAN_KEEP:?}/$part" && mkdir -p "$EMBER_C13_SAN_KEEP" &&
            cp -r build-gpu/gpu-sanitize "$EMBER_C13_SAN_KEEP/$part"
        fi
        ;;
      attention)
        compare_attention $(($(left) - 10)) "$sum"
        keep+=(attention_results.md)
        ;;
      gpt2 | char | gpt2-graphed | char-graphed)
        # ember eager only, or (-graphed) bench_gpt's eager and graphed rows both
        w=${part%-graphed} eager=--eager
        [ "$w" = "$part" ] || eager=""
        timeout $(($(left) - 10)) python3 benchmarks/peer_gpt.py --only "$w" --interleave 5 \
          --ours "build-gpu/benchmarks/bench_gpt --only $w $eager" \
          >"$out/gpt_vs_torch_$part.txt" 2>&1
        echo "peer_gpt.py exit status $?" | tee -a "$sum"
        tail -14 "$out/gpt_vs_torch_$part.txt" | tee -a "$sum"
        keep+=("gpt_vs_torch_$part.txt")
        ;;
      issue28)
        # issue 28's targets but the GPT steps' (benchmarks/compare.sh's issue28 set: the
        # MLP and digits steps, the bf16 GEMM against cuBLASLt, cross-entropy and layer
        # norm against PyTorch), 5 repetitions alternating, cut at the part's time
        timeout $(($(left) - 15)) env EMBER_BENCH_PREBUILT=1 EMBER_BENCH_BUILD=build-gpu \
          EMBER_LIBTORCH=none EMBER_BENCH_QUICK=1 EMBER_COMPARE_REPS=5 \
          EMBER_COMPARE_SET=issue28 benchmarks/compare.sh "$out/issue28" >"$out/issue28.txt" 2>&1
        echo "compare.sh exit status $?" | tee -a "$sum"
        [ -f "$out/issue28/RESULTS.md" ] ||
          python3 benchmarks/results_table.py "$out/issue28" >"$out/issue28/RESULTS.md" 2>&1
        cp "$out/issue28/RESULTS.md" "$out/issue28_results.md"
        grep -A40 '^### Targets' "$out/issue28_results.md" | tee -a "$sum"
        keep+=(issue28_results.md)
        ;;
      memory)
        # predict_memory's peak allocated and reserved bytes against the GPU's, both GPT
        # steps (3 steps each; bench_gpt --memory exits 1 unless they are equal)
        timeout $(($(left) - 10)) build-gpu/benchmarks/bench_gpt --memory >"$out/memory.txt" 2>&1
        echo "bench_gpt --memory exit status $?" | tee -a "$sum"
        grep -E '^memory ' "$out/memory.txt" | tee -a "$sum"
        keep+=(memory.txt)
        ;;
      profile-char | profile-gpt2)
        # ember's profiler over 3 steps: the key_averages table by device time
        w=${part#profile-}
        timeout $(($(left) - 10)) build-gpu/benchmarks/bench_gpt --profile --only "$w" \
          --steps 3 >"$out/$part.txt" 2>&1
        echo "bench_gpt --profile exit status $?" | tee -a "$sum"
        head -50 "$out/$part.txt" | tee -a "$sum"
        keep+=("$part.txt")
        ;;
      cases-new)
        # the attention and index cases (the wgmma kernels' dropout, the embedding
        # backward's long runs)
        timeout 200 build-gpu/tests/ember_tests_cuda -tc='*attention*,kernels/index*' \
          >"$out/cases_new.txt" 2>&1
        echo "ember_tests_cuda attention and index cases exit status $?" | tee -a "$sum"
        grep -E 'test cases:|assertions:|ERROR|FAILED' "$out/cases_new.txt" | head -20 |
          tee -a "$sum"
        ;;
      char-att-ab)
        # bench_gpt --only char with attention dropout on version 1's kernels (0, the
        # default) and on version 2's wgmma kernels (1: EMBER_ATTENTION_DROPOUT_WGMMA=1),
        # alternating
        bench_ab char_att "${EMBER_SWITCHES_RESERVE:-25}" set_dwg -- \
          build-gpu/benchmarks/bench_gpt --only char | tee -a "$sum"
        ;;
      char-dal-ab | char-new-ab)
        # bench_gpt --only char with the blocks' dropouts as their own kernels (0) and
        # inside the norms (1, the default); -new: that and the weights' one-launch cast
        # together, off (0) and on (1); alternating
        ab_setter=set_dal
        [ "$part" = char-new-ab ] && ab_setter=set_new
        bench_ab "${part//-/_}" "${EMBER_SWITCHES_RESERVE:-25}" "$ab_setter" -- \
          build-gpu/benchmarks/bench_gpt --only char | tee -a "$sum"
        ;;
      cases-dal)
        # the cases of dropout_add_layer_norm, the dropout kernels, the graph's draws, the
        # multi-tensor norm and Adam (ember_tests_cuda), and autocast's cast_parameters
        # and dropout's (ember_tests_core's CUDA cases)
        timeout 300 build-gpu/tests/ember_tests_cuda \
          -tc='*dropout*,kernels/layer_norm*,cuda/graph*,*clip_grad*,*Adam*,*adam*' \
          >"$out/cases_dal.txt" 2>&1
        echo "ember_tests_cuda dropout, norm, graph, clip and Adam cases exit status $?" |
          tee -a "$sum"
        grep -E 'test cases:|assertions:|ERROR|FAILED' "$out/cases_dal.txt" | head -20 |
          tee -a "$sum"
        timeout 200 build-gpu/tests/ember_tests_core -tc='autocast*,dropout*' \
          >"$out/cases_autocast.txt" 2>&1
        echo "ember_tests_core autocast and dropout cases exit status $?" | tee -a "$sum"
        grep -E 'test cases:|assertions:|ERROR|FAILED' "$out/cases_autocast.txt" | head -20 |
          tee -a "$sum"
        ;;
      san-dal)
        # the cases of the sixteenth session's kernels under the four sanitizers at once:
        # the norm's dropout and the graph's draws (ember_tests_cuda), the dropout kernels
        # and the multi-tensor cast (ember_tests_core), the multi-tensor norm and scale
        # (ember_tests_nn), fused Adam (ember_tests_optim); a quarter of the time each
        t=$((($(left) - ${EMBER_C13_AFTER_SANITIZE:-15}) / 4))
        sanitize4 "$out/san_dal_cuda" "$t" build-gpu/tests/ember_tests_cuda \
          -tc='kernels/layer_norm: dropout*,cuda/graph: random*' | tee -a "$sum"
        sanitize4 "$out/san_dal_core" "$t" build-gpu/tests/ember_tests_core -ts=cuda \
          -tc='dropout on CUDA*,autocast: cast_parameters on CUDA*' | tee -a "$sum"
        sanitize4 "$out/san_dal_nn" "$t" build-gpu/tests/ember_tests_nn -ts=cuda \
          -tc='*clip_grad*' | tee -a "$sum"
        sanitize4 "$out/san_dal_optim" "$t" build-gpu/tests/ember_tests_optim -ts=cuda \
          -tc='optim/cuda*' | tee -a "$sum"
        ;;
      san-new)
        # the attention dropout case and the index cases under the four
        # sanitizers at once
        t=$(($(left) - ${EMBER_C13_AFTER_SANITIZE:-15}))
        sanitize4 "$out/san_new" "$t" build-gpu/tests/ember_tests_cuda \
          -tc='*dropout in the kernels*,kernels/index*' | tee -a "$sum"
        ;;
      kernels-char | kernels-gpt2)
        # one step's kernels by device time: ncu's durations at the card's own clocks,
        # every launch of bench_gpt --profile --steps 1, the last step picked out
        w=${part#kernels-}
        t=$(($(left) - 10)); [ "$t" -gt 150 ] && t=150
        timeout "$t" ncu --metrics gpu__time_duration.sum --clock-control none \
          --cache-control none --csv --page details build-gpu/benchmarks/bench_gpt --profile \
          --only "$w" --steps 1 >"$out/$part.csv" 2>"$out/$part.err"
        echo "ncu exit status $?" | tee -a "$sum"
        tail -3 "$out/$part.err" | tee -a "$sum"
        python3 tools/kernel_times.py "$out/$part.csv" --top 60 >"$out/$part.txt" 2>&1
        head -64 "$out/$part.txt" | tee -a "$sum"
        keep+=("$part.txt")
        ;;
      torch-profile-char | torch-profile-gpt2)
        # PyTorch's compiled step under torch.profiler: device time per kernel
        w=${part#torch-profile-}
        timeout $(($(left) - 10)) python3 benchmarks/peer_gpt.py --only "$w" --profile \
          >"$out/$part.txt" 2>&1
        echo "peer_gpt.py --profile exit status $?" | tee -a "$sum"
        grep -A48 '^profile ' "$out/$part.txt" | tee -a "$sum"
        keep+=("$part.txt")
        ;;
      *) echo "closing13: unknown part $part" | tee -a "$sum" ;;
    esac
  done
elif [ "$stage" = round12e ]; then
  # Little device time: the pack's suite, then bench_attention (the op's fused attention at
  # issue 27's shapes, every output checked first) with EMBER_ATTENTION fused (0:
  # deterministic, backward 2 or 3) and atomic (1: backward version 4), alternating.
  echo "=== the whole suite at the defaults ($(left) s left)"
  suite set1 EMBER_SUITE_AT_DEFAULTS | tail -28 | tee "$out/r12e_summary.txt"
  echo "=== bench_attention, EMBER_ATTENTION fused (0) and atomic (1), alternating ($(left) s left)"
  bench_ab r12e_att 35 set_att -- build-gpu/benchmarks/bench_attention |
    tee -a "$out/r12e_summary.txt"
  keep=(gpu.txt r12e_summary.txt suite_summary.txt)
elif [ "$stage" = sanpeer ]; then
  case "${EMBER_SANITIZE_PART:-cuda}" in
    cuda) only=cuda ;;
    rest) only=core,memory,nn,optim,parallel ;;
    *) only=$EMBER_SANITIZE_PART ;;
  esac
  w=${EMBER_PEER_ONLY:-none}
  deadline=${EMBER_SANITIZE_DEADLINE:-$(($(left) - $([ "$w" = none ] && echo 20 || echo 200)))}
  echo "=== tools/gpu_sanitize.sh over $only, deadline $deadline s ($(left) s left)"
  EMBER_COMMIT=$(cat build-gpu/ember_commit.txt) EMBER_GPU_SANITIZE_ONLY=$only \
    EMBER_GPU_SANITIZE_JOBS=16 EMBER_GPU_SANITIZE_SHARD=3 \
    EMBER_GPU_SANITIZE_DEADLINE=$deadline EMBER_GPU_SANITIZE_PROBE=1 \
    tools/gpu_sanitize.sh build-gpu >"$out/sanitize.txt" 2>&1
  echo "gpu_sanitize exit status $?" | tee "$out/sanitize_summary.txt"
  grep -v '^gpu-sanitize: \(memcheck\|racecheck\|initcheck\|synccheck\) on ' "$out/sanitize.txt" |
    tail -60 | tee -a "$out/sanitize_summary.txt"
  cp -r build-gpu/gpu-sanitize "$out/sanitize_logs" 2>/dev/null
  if [ "$w" != none ]; then
    echo "=== $w: PyTorch eager and torch.compile against bench_gpt, interleaved ($(left) s left)"
    timeout $(($(left) - 10)) python3 benchmarks/peer_gpt.py --only "$w" --interleave 5 \
      --ours "build-gpu/benchmarks/bench_gpt --only $w ${EMBER_CLOSING_OURS_FLAGS:-}" \
      >"$out/gpt_vs_torch_$w.txt" 2>&1
    echo "exit status $?" >>"$out/gpt_vs_torch_$w.txt"
    tail -14 "$out/gpt_vs_torch_$w.txt"
  fi
  keep=(gpu.txt sanitize_summary.txt "gpt_vs_torch_$w.txt")
elif [ "$stage" = round10b ]; then
  echo "=== gpt2: PyTorch eager and torch.compile against bench_gpt --eager, interleaved ($(left) s left)"
  timeout 260 python3 benchmarks/peer_gpt.py --only gpt2 --interleave 5 \
    --ours "build-gpu/benchmarks/bench_gpt --only gpt2 --eager" >"$out/gpt_vs_torch_gpt2.txt" 2>&1
  echo "exit status $?" >>"$out/gpt_vs_torch_gpt2.txt"
  tail -14 "$out/gpt_vs_torch_gpt2.txt"
  echo "=== GPT-2 eager, EMBER_LAYER_NORM_LEAN 0 and 1, alternating ($(left) s left)"
  gpt_ab leanab "${EMBER_SWITCHES_RESERVE:-40}" set1 EMBER_LAYER_NORM_LEAN | tee "$out/lean_ab.txt"
  keep=(gpu.txt gpt_vs_torch_gpt2.txt lean_ab.txt)
else
  echo "usage: tools/gpu_switches_check.sh conv|gpt|attn|combo|lnwarp|final|closing|ncu|qkv|round9|round10|round10b|round11|round12|round12c|round12e|round13a|closing13|sanpeer" >&2
  exit 2
fi
tools/gpu_logs_pack.sh "$out" "${keep[@]}" && [ -f "$out/logs.tgz" ] && mv "$out/logs.tgz" "$out/more.tgz"
ls "$out"
echo "done at $(($(date +%s) - t0)) s"
