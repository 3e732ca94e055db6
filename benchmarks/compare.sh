#!/usr/bin/env bash
# The one command that checks ember's speed claims on your GPU: builds in Release,
# runs ember's benchmark binaries and their peers (PyTorch in Python, libtorch in
# C++) on the same GPU, and writes one markdown table of medians, spreads, ratios
# and verdicts (benchmarks/results_table.py says how each is read).
#   benchmarks/compare.sh [OUTDIR]        (make compare; default OUTDIR: bench-results/<UTC time>)
#   EMBER_COMPARE_REPS=N   repetitions (default 5). Each repetition runs ours, then the
#                          peers, as separate processes, so ours and the peer's runs
#                          alternate: ours, peer, ours, peer, ... (OUTDIR/rep-K/).
#   EMBER_COMPARE_SET=...  what the repetitions cover, comma-separated (default host,mlp):
#                          host    seed step, per-op overhead, small Linear shapes: ember
#                                  against libtorch and PyTorch
#                          mlp     the 4 x 4096 MLP step: ember against PyTorch
#                          device  Linear sweep, MSE, optimizer steps: ember against PyTorch
#                          gpt     the GPT training step (char and GPT-2 124M shapes, bf16):
#                                  ember against PyTorch eager and torch.compile
#                          conv    bench_conv (convolution, batch norm, ResNet-8 step) against
#                                  PyTorch with cuDNN (peer_conv.py)
#                          attention  bench_attention (fused attention, bf16, issue 27's shapes
#                                  and T 4096, 8192; forward, forward+backward) against PyTorch's
#                                  sdpa, its faster of flash and cuDNN (peer_attention.py), and
#                                  against ember's composed path (bench_attention --composed)
#                          issue28 issue 28's targets but the GPT steps': the MLP step and
#                                  the digits step (eager and graphed), bench_linear --dtype bf16
#                                  (the Hopper GEMM against cuBLASLt in the same process),
#                                  cross-entropy and layer norm, against PyTorch
#                          elementwise  bench_elementwise (GPT-2's element-wise work, strided and
#                                  vector kernels) against PyTorch (peer_pytorch.py --only
#                                  elementwise)
#                          once    allocator, alloc_site, parallel: run in rep-1 only (no peer)
#                          all     every one of these
#   EMBER_BENCH_QUICK=1    fewer rounds inside each process (a smoke run)
#   EMBER_BENCH_BUILD=DIR  build directory (default build-release; an existing one is reused)
#   EMBER_BENCH_PREBUILT=1 run the binaries already in DIR as they are (a build carried to
#                          the GPU machine, tools/gpu_conv_check.sh): no configure, no build
#   EMBER_LIBTORCH=PATH    the peer_libtorch binary; default: benchmarks/peer_libtorch.sh
#                          builds it when python3 can import torch; "none" skips it
# OUTDIR gets env.txt (GPU, driver, commit, time), each process's output (rep-K/*.txt)
# and rows (rep-K/*.json), gpu_clocks.csv (SM clock, power, temperature and throttle
# reasons sampled every 500 ms while the benchmarks ran) and RESULTS.md.
# Every ember binary checks what it times before timing it; a failed check prints
# no row and exits non-zero, which this script reports (and exits 1).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results/$(date -u +%Y%m%d-%H%M%S)}
out="$(realpath -m "$out")"
build=${EMBER_BENCH_BUILD:-build-release}
reps=${EMBER_COMPARE_REPS:-5}
set_=${EMBER_COMPARE_SET:-host,mlp}
[ "$set_" = all ] && set_=host,mlp,device,gpt,once
quick=()
[ "${EMBER_BENCH_QUICK:-0}" = 1 ] && quick=(--quick)
mkdir -p "$out"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "compare.sh: no NVIDIA GPU here (nvidia-smi -L failed); the benchmarks need one" >&2
  exit 1
fi
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
has() { [[ ",$set_," == *",$1,"* ]]; }

gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if [ -f "$build/CMakeCache.txt" ]; then  # an existing build: keep its configuration
  echo "compare.sh: building in $build ($(grep -E '^CMAKE_BUILD_TYPE' "$build/CMakeCache.txt" | cut -d= -f2)) ..."
  configure=(true)
else
  echo "compare.sh: configuring and building $build (Release) ..."
  configure=(cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_TESTS=OFF
             -DEMBER_BUILD_EXAMPLES=OFF ${EMBER_CMAKE_FLAGS:-})
fi
if [ "${EMBER_BENCH_PREBUILT:-0}" = 1 ]; then
  echo "compare.sh: running the binaries in $build as they are (EMBER_BENCH_PREBUILT=1)"
elif ! "${configure[@]}" >"$out/configure.log" 2>&1 ||
   ! cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1; then
  echo "compare.sh: build failed; see $out/configure.log and $out/build.log" >&2
  tail -20 "$out/build.log" >&2
  exit 1
fi
libtorch=${EMBER_LIBTORCH:-}
if [ -z "$libtorch" ] && has host; then
  if lt_log=$(benchmarks/peer_libtorch.sh build-libtorch 2>&1); then
    libtorch=$(echo "$lt_log" | tail -1)
  else
    echo "$lt_log" | tail -5
    echo "compare.sh: no libtorch peer (benchmarks/peer_libtorch.sh failed); its columns stay empty"
  fi
  echo "$lt_log" >"$out/peer_libtorch_build.log"
fi
[ "$libtorch" = none ] && libtorch=

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (working tree modified)')"
  [ -f "$build/ember_commit.txt" ] && echo "build: packed at $(cat "$build/ember_commit.txt")"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "torch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not installed')"
  echo "repetitions: $reps, covering: $set_ (ours and the peers alternate, one process each)"
} >"$out/env.txt"
cat "$out/env.txt"

# The GPU's clocks while everything runs: a throttled SM clock is the first thing to
# rule out when two runs of the same code differ (benchmarks/NOTES.md).
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 500 >"$out/gpu_clocks.csv" 2>/dev/null &
clocks_pid=$!
# Each benchmark runs under its own `timeout`, which puts it in a process group of its
# own, so a signal that stops this script (an outer timeout's) would not reach it: it
# would run on and be timed beside whatever runs next. So the script waits on it in the
# background and, stopped, stops it first.
child=
trap 'kill "$clocks_pid" 2>/dev/null; [ -n "$child" ] && kill "$child" 2>/dev/null' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

status=0
run() {  # dir, name, timeout, command...
  local dir=$1 name=$2 limit=$3; shift 3
  echo "== $(basename "$dir") $name"
  timeout "$limit" "$@" >"$dir/$name.txt" 2>&1 </dev/null &
  child=$!
  wait "$child"
  local rc=$?
  child=
  tail -2 "$dir/$name.txt" | sed 's/^/   /'
  if [ $rc -ne 0 ]; then echo "   $name exited $rc (log: $dir/$name.txt)"; status=1; fi
}
b=$build/benchmarks
for ((k = 1; k <= reps; ++k)); do
  d="$out/rep-$k"
  mkdir -p "$d"
  if has host; then
    run "$d" train_step_seed 120 "$b/bench_train_step" --only seed --json "$d/train_step_seed.json" "${quick[@]}"
    run "$d" op_overhead 120 "$b/bench_op_overhead" --json "$d/op_overhead.json"
    run "$d" linear_small 120 "$b/bench_linear_small" --json "$d/linear_small.json"
    [ -n "$libtorch" ] && run "$d" peer_libtorch 180 "$libtorch" --out "$d" "${quick[@]}"
    run "$d" peer_train_step_seed 180 python3 benchmarks/peer_train_step.py --only seed \
      --json "$d/peer_train_step_seed.json" "${quick[@]}"
    run "$d" peer_host_bound 180 python3 benchmarks/peer_host_bound.py --out "$d"
  fi
  if has host || has issue28; then
    # The digits MLP: PyTorch starts from the weights bench_digits_mlp wrote.
    run "$d" digits_mlp 300 "$b/bench_digits_mlp" --json "$d/digits_mlp.json" \
      --init "$d/digits_mlp_init.ckp" "${quick[@]}"
    [ -f "$d/digits_mlp_init.ckp" ] &&
      run "$d" peer_train_step_digits 300 python3 benchmarks/peer_train_step.py --only digits \
        --digits-init "$d/digits_mlp_init.ckp" --json "$d/peer_train_step_digits.json" "${quick[@]}"
  fi
  if has mlp || has issue28; then
    run "$d" train_step_mlp 300 "$b/bench_train_step" --only mlp --json "$d/train_step_mlp.json" "${quick[@]}"
    run "$d" peer_train_step_mlp 300 python3 benchmarks/peer_train_step.py --only mlp \
      --json "$d/peer_train_step_mlp.json" "${quick[@]}"
  fi
  if has device; then
    run "$d" linear 300 "$b/bench_linear" --json "$d/linear.json" "${quick[@]}"
    run "$d" mse 180 "$b/bench_mse" --json "$d/mse.json"
    run "$d" adam 180 "$b/bench_adam" --json "$d/adam.json"
    run "$d" cross_entropy 180 "$b/bench_cross_entropy" --json "$d/cross_entropy.json"
    run "$d" layer_norm 120 "$b/bench_layer_norm" --json "$d/layer_norm.json"
    run "$d" peer 300 python3 benchmarks/peer_pytorch.py --json "$d/peer.json"
  fi
  if has issue28 && ! has device; then  # the device set's rows that issue 28 reads
    run "$d" linear 300 "$b/bench_linear" --dtype bf16 --json "$d/linear.json" "${quick[@]}"
    run "$d" cross_entropy 180 "$b/bench_cross_entropy" --json "$d/cross_entropy.json"
    run "$d" layer_norm 120 "$b/bench_layer_norm" --json "$d/layer_norm.json"
    run "$d" peer 300 python3 benchmarks/peer_pytorch.py --only linear,cross_entropy,layer_norm \
      --json "$d/peer.json"
  fi
  if has gpt; then
    run "$d" gpt 900 "$b/bench_gpt" --json "$d/gpt.json" "${quick[@]}"
    run "$d" peer_gpt 1500 python3 benchmarks/peer_gpt.py --json "$d/peer_gpt.json" "${quick[@]}"
  fi
  if has conv; then
    run "$d" conv 300 "$b/bench_conv" --json "$d/conv.json" "${quick[@]}"
    run "$d" peer_conv 300 python3 benchmarks/peer_conv.py --json "$d/peer_conv.json" "${quick[@]}"
  fi
  if has attention; then
    run "$d" attention 300 "$b/bench_attention" --json "$d/attention.json" "${quick[@]}"
    run "$d" peer_attention 300 python3 benchmarks/peer_attention.py --json "$d/peer_attention.json" "${quick[@]}"
    # The same shapes through the composed path (EMBER_ATTENTION is read once per process).
    run "$d" attention_composed 600 env EMBER_ATTENTION=composed "$b/bench_attention" --composed \
      --json "$d/attention_composed.json" "${quick[@]}"
  fi
  if has elementwise; then
    run "$d" elementwise 300 "$b/bench_elementwise" --json "$d/elementwise.json"
    run "$d" peer_elementwise 300 python3 benchmarks/peer_pytorch.py --only elementwise \
      --json "$d/peer_elementwise.json"
  fi
  if has once && [ "$k" = 1 ]; then
    run "$d" allocator 300 "$b/bench_allocator" --json "$d/allocator.json"
    [ -x "$b/bench_alloc_site" ] && run "$d" alloc_site 120 "$b/bench_alloc_site"
    [ -x "$b/bench_parallel" ] && run "$d" parallel 300 "$b/bench_parallel" --json "$d/parallel.json" "${quick[@]}"
    [ -f benchmarks/peer_parallel.py ] &&
      run "$d" peer_parallel 300 python3 benchmarks/peer_parallel.py --json "$d/peer_parallel.json" "${quick[@]}"
  fi
done
kill "$clocks_pid" 2>/dev/null

{
  echo "## Benchmark run"
  echo
  sed 's/^/    /' "$out/env.txt"
  echo
  python3 benchmarks/results_table.py "$out"
} >"$out/RESULTS.md"
echo "compare.sh: tables in $out/RESULTS.md (status $status)"
exit $status
