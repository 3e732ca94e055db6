#!/usr/bin/env bash
# bench_cpu against libtorch on this host's CPU, interleaved in one run: for each
# thread count (1, 2 and every core by default) and each case, REPS repetitions of
# (ember's bench_cpu, then the libtorch peer), each repetition a fresh process that
# validates its output before timing (benchmarks/cpu.cpp says how). Prints, per case
# and thread count, the median over repetitions of each side's per-call time, their
# min-max, ours / libtorch's, and the ratio per repetition (ours over the peer run
# right after it): its median and min-max, the spread a target is read against.
#   benchmarks/bench_cpu.sh [BUILD_DIR (default build-release)] [REPS (default 5)] [THREADS...]
#   EMBER_BENCH_CPU_CASES="matmul1024 linear"  only those cases (default: every case)
#   EMBER_BENCH_CPU_PIN=0,1                    run both sides under `taskset -c 0,1` (the
#                                              same CPUs for ours and the peer)
# Needs python3 with torch (the peer is built with g++ against the package's own
# libtorch, CPU libraries only); without it, ember's side alone.
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-release}"
reps="${2:-5}"
shift 2 2>/dev/null || shift $#
threads=("$@")
[ ${#threads[@]} -eq 0 ] && threads=(1 2 "$(nproc)")
cases=(matmul256 matmul1024 linear gelu softmax layer_norm digits_mlp char_gpt)
if [ -n "${EMBER_BENCH_CPU_CASES:-}" ]; then
  read -r -a cases <<<"$EMBER_BENCH_CPU_CASES"
fi
pin=()
if [ -n "${EMBER_BENCH_CPU_PIN:-}" ]; then
  command -v taskset >/dev/null || { echo "bench_cpu.sh: EMBER_BENCH_CPU_PIN needs taskset" >&2; exit 1; }
  pin=(taskset -c "$EMBER_BENCH_CPU_PIN")
fi
ours="$build/benchmarks/bench_cpu"
[ -x "$ours" ] || { echo "bench_cpu.sh: no $ours (cmake --build $build --target bench_cpu)" >&2; exit 1; }

peer=""
if torch_dir="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)"; then
  abi="$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')"
  peer="$build/peer_cpu_libtorch"
  if [ ! -x "$peer" ] || [ benchmarks/peer_cpu_libtorch.cpp -nt "$peer" ]; then
    echo "bench_cpu.sh: building the libtorch peer against $torch_dir" >&2
    g++ -O2 -std=c++20 -D_GLIBCXX_USE_CXX11_ABI="$abi" benchmarks/peer_cpu_libtorch.cpp \
        -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" \
        -L"$torch_dir/lib" -Wl,-rpath,"$torch_dir/lib" -ltorch_cpu -lc10 \
        -o "$peer" 2>"$build/peer_cpu_libtorch.log" || {
      echo "bench_cpu.sh: the peer did not build:" >&2; tail -20 "$build/peer_cpu_libtorch.log" >&2
      peer=""; }
  fi
else
  echo "bench_cpu.sh: python3 cannot import torch: ember's side only" >&2
fi

echo "# bench_cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores," \
     "$(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null)" \
     "${EMBER_COMMIT:+(EMBER_COMMIT $EMBER_COMMIT)}" \
     "$([ -f "$build/ember_commit.txt" ] && echo "(build packed at $(cat "$build/ember_commit.txt"))")" \
     "${EMBER_BENCH_CPU_PIN:+pinned to CPUs $EMBER_BENCH_CPU_PIN}"
log="$(mktemp)"
status=0
for t in "${threads[@]}"; do
  for c in "${cases[@]}"; do
    for ((r = 0; r < reps; ++r)); do
      "${pin[@]}" "$ours" --case "$c" --threads "$t" >>"$log" || { echo "bench_cpu.sh: ours failed on $c" >&2; status=1; }
      if [ -n "$peer" ]; then
        "${pin[@]}" "$peer" --case "$c" --threads "$t" >>"$log" || { echo "bench_cpu.sh: peer failed on $c" >&2; status=1; }
      fi
    done
  done
done
grep -m1 '^# cpu blas' "$log"
python3 - "$log" <<'PY'
import re, sys, statistics
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) case=(\S+) threads=(\d+) ms=([\d.]+)", line)
    if m:
        rows.setdefault((m[2], int(m[3])), {}).setdefault(m[1], []).append(float(m[4]))
def fmt(v):
    return f"{statistics.median(v):9.4f} ({min(v):.4f}-{max(v):.4f})" if v else "-"
# The ratio's spread: repetition i of ours over repetition i of the peer (they ran
# back to back), the min and max of those; its median beside the ratio of medians.
print(f"| case | threads | ember ms median (min-max) | libtorch ms median (min-max) | ember / libtorch | per repetition: median (min-max) |")
print("|---|---|---|---|---|---|")
for (case, t), d in rows.items():
    o, p = d.get("bench_cpu", []), d.get("peer_cpu", [])
    ratio = f"{statistics.median(o) / statistics.median(p):.2f}x" if o and p else "-"
    pairs = [a / b for a, b in zip(o, p)] if o and p and len(o) == len(p) else []
    paired = f"{statistics.median(pairs):.2f}x ({min(pairs):.2f}-{max(pairs):.2f})" if pairs else "-"
    print(f"| {case} | {t} | {fmt(o)} | {fmt(p)} | {ratio} | {paired} |")
PY
rm -f "$log"
exit $status
