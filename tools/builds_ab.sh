#!/usr/bin/env bash
# Host-overhead benchmarks of several builds, run alternately (one run of each build per
# repetition, in the order given), REPS times; each run's JSON and log under $OUT; then,
# per row, every build's median [min-max] and the per-repetition ratio of each build to
# the first. No run starts after DEADLINE seconds. BENCHES names the benchmarks
# (default: bench_op_overhead bench_alloc_site, the profiler's cost).
# Usage: tools/builds_ab.sh REPS DEADLINE NAME=BENCH_DIR [NAME=BENCH_DIR ...]
#   e.g. (benchmarks of afd599d^, before the profiler, and of afd599d, which added it,
#   each built with -DCMAKE_BUILD_TYPE=Release --target bench_op_overhead bench_alloc_site):
#   OUT=/tmp/ab tools/builds_ab.sh 7 100000 base=/tmp/base/build/benchmarks \
#     prof=/tmp/prof/build/benchmarks
set -uo pipefail
[ $# -ge 3 ] || { sed -n 2,11p "$0"; exit 2; }
reps="$1" deadline="$2"; shift 2
read -r -a benches <<<"${BENCHES:-bench_op_overhead bench_alloc_site}"
out="$(realpath -m "${OUT:-builds-ab}")"; mkdir -p "$out"
names=()
declare -A dirs
for spec in "$@"; do
  name="${spec%%=*}" dir="${spec#*=}"
  if [ "$name" = "$spec" ] || [ -z "$name" ]; then echo "not NAME=DIR: $spec"; exit 2; fi
  for b in "${benches[@]}"; do
    [ -x "$dir/$b" ] || { echo "no executable $dir/$b"; exit 2; }
  done
  names+=("$name"); dirs[$name]="$dir"
done
for b in "${benches[@]}"; do
  for i in $(seq 1 "$reps"); do
    for who in "${names[@]}"; do
      [ "$SECONDS" -lt "$deadline" ] || { echo "deadline: $b $who $i not run"; continue; }
      timeout 120 "${dirs[$who]}/$b" --json "$out/$b-$who-$i.json" >"$out/$b-$who-$i.log" 2>&1 ||
        echo "run failed: $b $who $i"
    done
  done
done
python3 - "$out" "$reps" "${#benches[@]}" "${benches[@]}" "${names[@]}" <<'PY'
import json, os, statistics, sys
out, reps, nb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
benches, names = sys.argv[4:4 + nb], sys.argv[4 + nb:]

def rows(bench, who, i):
    path = os.path.join(out, f"{bench}-{who}-{i}.json")
    if not os.path.exists(path):
        return {}
    data = json.load(open(path))
    if isinstance(data, list):  # bench_alloc_site: [{"what", "ns"}]
        return {r["what"]: r["ns"] for r in data}
    return {f'{r["workload"].strip()} {r["device"]} {r["shape"]}': r["host_ns_per_op"]
            for r in data["rows"]}

def cell(v):
    return f"{statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]" if v else "-"

for bench in benches:
    runs = {w: [rows(bench, w, i) for i in range(1, reps + 1)] for w in names}
    keys = []
    for w in names:
        for r in runs[w]:
            keys += [k for k in r if k not in keys]
    print(f"{bench}: ns per op, median [min-max] over runs; ratio = build / {names[0]} per run")
    for k in keys:
        cells = [f"{w} " + cell([r[k] for r in runs[w] if k in r]) for w in names]
        for w in names[1:]:
            ratio = [a[k] / b[k] for a, b in zip(runs[w], runs[names[0]]) if k in a and k in b]
            cells.append(f"{w}/{names[0]} " + cell(ratio))
        print(" | ".join([k] + cells))
PY
