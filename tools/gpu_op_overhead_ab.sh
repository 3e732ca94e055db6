#!/usr/bin/env bash
# On the GPU machine: bench_op_overhead of this tree against a baseline tree (a source
# snapshot, e.g. `git archive <commit> | tar -x -C .device/baseline`), both built in
# Release, run alternately (ours, baseline, ours, ...) REPS times each so drift hits
# both; prints every run's rows and the per-row medians and min-max. Logs under $OUT.
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
for i in $(seq 1 "$reps"); do
  for who in ours base; do
    bin="$ours_bin"; [ $who = base ] && bin="$base_bin"
    "$bin" --json "$out/ab-$who-$i.json" >"$out/ab-$who-$i.log" 2>&1 || echo "run failed: $who $i"
  done
done
python3 - "$out" "$reps" <<'PY'
import json, sys, statistics, os
out, reps = sys.argv[1], int(sys.argv[2])
rows = {}
for who in ("ours", "base"):
    for i in range(1, reps + 1):
        p = os.path.join(out, f"ab-{who}-{i}.json")
        if not os.path.exists(p): continue
        for r in json.load(open(p))["rows"]:
            key = (r["workload"], r["device"], r["shape"])
            rows.setdefault(key, {}).setdefault(who, []).append(r["host_ns_per_op"])
print("host ns per op, A/B: median [min-max] over runs; ratio = ours / baseline medians")
for key, d in rows.items():
    cells = []
    for who in ("base", "ours"):
        v = d.get(who, [])
        cells.append(f"{who} {statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]" if v else f"{who} -")
    b, o = d.get("base"), d.get("ours")
    ratio = f"{statistics.median(o) / statistics.median(b):.3f}" if b and o else "-"
    print(" | ".join([" ".join(str(k) for k in key)] + cells + [ratio]))
PY
