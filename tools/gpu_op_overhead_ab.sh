#!/usr/bin/env bash
# On the GPU machine: bench_op_overhead of this tree against a baseline tree (a source
# snapshot, e.g. `git archive <commit> | tar -x -C .device/baseline`), both built in
# Release, run alternately (baseline, ours, baseline, ...) REPS times each so drift hits
# both, by tools/builds_ab.sh: every run's log and JSON, and the per-row medians and
# min-max with the per-run ratio ours / baseline. Logs under $OUT.
# Usage: tools/gpu_op_overhead_ab.sh BASELINE_DIR [REPS]
set -uo pipefail
base="$1"; reps="${2:-5}"
out="$(realpath -m "${OUT:-gpu-logs}")"; mkdir -p "$out"
# OURS_BIN: an already built bench_op_overhead of this tree (else built here).
ours_bin="${OURS_BIN:-build-ab/benchmarks/bench_op_overhead}"
base_bin="$base/build-ab/benchmarks/bench_op_overhead"
for tree in . "$base"; do
  bin="$ours_bin"; [ "$tree" = "$base" ] && bin="$base_bin"
  [ -x "$bin" ] && continue
  cmake -S "$tree" -B "$tree/build-ab" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_EXAMPLES=OFF \
    >"$out/ab-configure.log" 2>&1 &&
  cmake --build "$tree/build-ab" -j16 --target bench_op_overhead >"$out/ab-build.log" 2>&1 \
    || { echo "build failed: $tree"; tail -20 "$out/ab-build.log"; exit 1; }
done
OUT="$out" BENCHES=bench_op_overhead "$(dirname "$0")/builds_ab.sh" "$reps" 1000000000 \
  "base=$(dirname "$base_bin")" "ours=$(dirname "$ours_bin")"
