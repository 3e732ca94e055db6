#!/usr/bin/env bash
# The one command that checks ember's speed claims on your GPU: builds in
# Release, runs every benchmark binary and the PyTorch peer scripts on the same
# GPU, and writes one markdown table of ratios (ours / PyTorch).
#   benchmarks/compare.sh [OUTDIR]        (make compare; default OUTDIR: bench-results/<UTC time>)
#   EMBER_BENCH_QUICK=1   fewer repetitions (a smoke run)
#   EMBER_BENCH_BUILD=DIR build directory (default build-release; an existing one is reused)
# OUTDIR gets each program's output (*.txt), its rows (*.json), env.txt (GPU,
# driver, commit, time) and RESULTS.md (the joined tables, env first).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results/$(date -u +%Y%m%d-%H%M%S)}
build=${EMBER_BENCH_BUILD:-build-release}
quick=()
[ "${EMBER_BENCH_QUICK:-0}" = 1 ] && quick=(--quick)
mkdir -p "$out"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "compare.sh: no NVIDIA GPU here (nvidia-smi -L failed); the benchmarks need one" >&2
  exit 1
fi
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if [ -f "$build/CMakeCache.txt" ]; then  # an existing build: keep its configuration
  echo "compare.sh: building in $build ($(grep -E '^CMAKE_BUILD_TYPE' "$build/CMakeCache.txt" | cut -d= -f2)) ..."
  configure=(true)
else
  echo "compare.sh: configuring and building $build (Release) ..."
  configure=(cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_TESTS=OFF
             -DEMBER_BUILD_EXAMPLES=OFF ${EMBER_CMAKE_FLAGS:-})
fi
if ! "${configure[@]}" >"$out/configure.log" 2>&1 ||
   ! cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1; then
  echo "compare.sh: build failed; see $out/configure.log and $out/build.log" >&2
  tail -20 "$out/build.log" >&2
  exit 1
fi

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (working tree modified)')"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "torch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not installed')"
} >"$out/env.txt"
cat "$out/env.txt"

status=0
run() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  echo "== $name"
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  tail -3 "$out/$name.txt"
  if [ $rc -ne 0 ]; then echo "   $name exited $rc (log: $out/$name.txt)"; status=1; fi
}
b=$build/benchmarks
run linear 300 "$b/bench_linear" --json "$out/linear.json"
run mse 120 "$b/bench_mse" --json "$out/mse.json"
run adam 120 "$b/bench_adam" --json "$out/adam.json"
run train_step 300 "$b/bench_train_step" --json "$out/train_step.json" "${quick[@]}"
digits_init=()
if [ -x "$b/bench_digits_mlp" ]; then
  run digits_mlp 300 "$b/bench_digits_mlp" --json "$out/digits_mlp.json" \
    --init "$out/digits_mlp_init.ckp" "${quick[@]}"
  [ -f "$out/digits_mlp_init.ckp" ] && digits_init=(--digits-init "$out/digits_mlp_init.ckp")
fi
[ -x "$b/bench_op_overhead" ] && run op_overhead 120 "$b/bench_op_overhead" --json "$out/op_overhead.json"
run allocator 300 "$b/bench_allocator" --json "$out/allocator.json"
[ -x "$b/bench_parallel" ] && run parallel 300 "$b/bench_parallel" --json "$out/parallel.json" "${quick[@]}"
run peer 300 python3 benchmarks/peer_pytorch.py --json "$out/peer.json"
run peer_train_step 300 python3 benchmarks/peer_train_step.py --json "$out/peer_train_step.json" \
  "${quick[@]}" "${digits_init[@]}"
[ -f benchmarks/peer_parallel.py ] &&
  run peer_parallel 300 python3 benchmarks/peer_parallel.py --json "$out/peer_parallel.json" "${quick[@]}"

{
  echo "## Benchmark run"
  echo
  sed 's/^/    /' "$out/env.txt"
  echo
  python3 benchmarks/results_table.py "$out"
} >"$out/RESULTS.md"
echo "compare.sh: tables in $out/RESULTS.md (status $status)"
exit $status
