#!/usr/bin/env bash
# One call on the GPU machine for parallel/ (issues 6 and 18; N = the GPUs this
# machine has, so the same call serves issue 19's 8-GPU run). With
# NCCL_NVLS_ENABLE=0 always, it runs, each step under `timeout`, logs and JSON in
# $OUT/parallel/:
#   1. ember_tests_parallel in one process (DataParallel and the NCCL group over
#      every GPU, the CPU tests) and under mpiexec -np N (NCCL across processes:
#      collectives on both communicators, DDP, bfloat16 reduce_dtype, ZeRO-1,
#      timeouts), then the NCCL cases again over the socket transport
#      (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 on loopback: what
#      two machines would use);
#   2. the rank-killed probes under ember-run: a rank SIGKILLed in DDP's
#      all-reduce, in ZeRO-1's reduce-scatter and in its all-gather;
#   3. examples/train_ddp under ember-run --nproc N, and examples/seed_train (what
#      `make demo` runs: DataParallel over every GPU, then the per-GPU view);
#   4. the all-reduce breakdown (bench_parallel --sections breakdown) and torch's;
#   5. bench_parallel and benchmarks/peer_parallel.py interleaved, REPS (5) times
#      each, alternating which goes first: all-reduce 256 KiB..256 MiB, the MLP
#      step under DDP (and bfloat16 gradients), DataParallel, ZeRO-1 vs DDP+Adam,
#      with memory_summary_all after DataParallel and ZeRO-1;
#   6. the all-reduce and DDP rows again over the socket transport, both sides;
# then prints the side-by-side tables last: median over the repetitions and the
# min-max spread, the targets of issue 18 met or missed.
#   OUT=/tmp/out tools/gpu_parallel.sh [BUILD_DIR]      (default build-gpu, as
# built by tools/gpu_run.sh; configured if absent; the targets used are rebuilt
# first if out of date, inside the budget)
# Stays under EMBER_PAR_BUDGET seconds (default 570: under 10 minutes), which caps
# every step; repetitions stop early (and the summary says so) when it runs out.
# Exit status: non-zero when a test, a probe or a run failed.
set -u
B=${1:-build-gpu}
O="$(realpath -m "${OUT:-gpu-logs}")/parallel"
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0
# mpiexec as root, shared memory only, as CTest runs it (tests/CMakeLists.txt).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_mpi_yield_when_idle=1
REPS=${EMBER_PAR_REPS:-5}
start=$(date +%s)
deadline=$((start + ${EMBER_PAR_BUDGET:-570}))
: >"$O/steps.tsv"
status=0

# step NAME CAP CMD...: runs CMD under timeout (CAP s, less if the budget is
# nearly spent) into $O/NAME.log; records name, rc and seconds in steps.tsv.
step() {
  local name=$1 cap=$2
  shift 2
  local left=$((deadline - $(date +%s)))
  ((left < cap)) && cap=$left
  if ((cap < 5)); then
    echo "$name: skipped, time budget spent" | tee "$O/$name.log"
    printf '%s\t%s\t%s\n' "$name" "skipped" 0 >>"$O/steps.tsv"
    status=1
    return 1
  fi
  local t0
  t0=$(date +%s)
  timeout -k 5 "$cap" "$@" >"$O/$name.log" 2>&1
  local rc=$?
  local took=$(($(date +%s) - t0)) note=""
  printf '%s\t%s\t%s\n' "$name" "$rc" "$took" >>"$O/steps.tsv"
  ((took >= cap)) && note=", TIMED OUT after $cap s"
  echo "$name: rc=$rc ($took s)$note"
  return $rc
}

if [ -n "${NGPU:-}" ]; then
  n=$NGPU
elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  n=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
else
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
fi
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nvidia-smi topo -m; } >"$O/gpu.txt" 2>&1
echo "gpu_parallel: $n GPU(s), build $B, logs in $O, NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE, $REPS repetitions"
((n >= 1)) || { echo "no GPU visible; nothing to run"; exit 1; }

# The GPU image has no doctest: the caller carries it in .device/doctest (as gpu_run.sh).
if [ ! -f /usr/include/doctest/doctest.h ] && [ -d .device/doctest ]; then
  cp -r .device/doctest/include/doctest /usr/include/ && cp -r .device/doctest/cmake/doctest /usr/lib/cmake/
fi
if [ ! -f "$B/build.ninja" ] && [ ! -f "$B/Makefile" ]; then
  # A fresh machine: configure as tools/gpu_run.sh does (the build then eats into the budget).
  step configure 60 cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ||
    { status=1; tail -20 "$O/configure.log"; }
fi
step build 240 cmake --build "$B" -j16 --target ember_tests_parallel bench_parallel ember-run \
  train_ddp seed_train || { status=1; tail -20 "$O/build.log"; }
T=$B/tests/ember_tests_parallel
R=$B/ember-run
BP=$B/benchmarks/bench_parallel
for f in "$T" "$R" "$B/examples/train_ddp" "$B/examples/seed_train" "$BP"; do
  [ -x "$f" ] || { echo "missing $f (build it: tools/gpu_run.sh, or cmake --build $B)"; status=1; }
done
MPIEXEC=$(command -v mpiexec || command -v mpirun || true)
SOCKET_ENV=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo)

# 1. Tests. One process: every GPU in DataParallel and in the one-thread NCCL group.
if [ -n "$MPIEXEC" ]; then
  step tests_np1 60 "$MPIEXEC" -np 1 --allow-run-as-root --oversubscribe "$T" --duration=true --no-colors=true || status=1
  if ((n >= 2)); then
    # One process per GPU: DDP, ZeRO-1 and the collectives over NCCL across processes.
    step "tests_np$n" 90 "$MPIEXEC" -np "$n" --allow-run-as-root --oversubscribe "$T" --duration=true --no-colors=true || status=1
    # The same NCCL cases through the socket transport (NCCL reads it at init).
    step "tests_socket_np$n" 60 env "${SOCKET_ENV[@]}" "$MPIEXEC" -np "$n" --allow-run-as-root --oversubscribe \
      -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x NCCL_IB_DISABLE -x NCCL_SOCKET_IFNAME -x NCCL_NVLS_ENABLE \
      "$T" --no-colors=true -tc="nccl/communicator*,nccl/ddp*,nccl/zero*" || status=1
  fi
else
  echo "no mpiexec: the parallel tests need it (apt-get install openmpi-bin)"
  status=1
fi
grep -E "^\[doctest\] test cases|skipped|ERROR|FAILED" "$O"/tests_*.log 2>/dev/null | sed "s|$O/||" | head -40

# 2. A rank killed in DDP's all-reduce, in ZeRO-1's reduce-scatter, in its all-gather.
for mode in ddp zero-rs zero-ag; do
  step "rank_killed_$mode" 40 "$R" --nproc $((n >= 2 ? n : 2)) "$T" --rank-killed-probe "$mode"
  grep -E "rank-killed probe" "$O/rank_killed_$mode.log" | cut -c1-260
  if grep -qE "too late|no error after|setup failed|wrong collective" "$O/rank_killed_$mode.log" ||
    ! grep -qE "rank-killed probe: (skipped|rank 0: failed in time)" "$O/rank_killed_$mode.log"; then
    echo "rank_killed_$mode: FAILED"
    status=1
  fi
done

# 3. The examples: one process per GPU, and the demo (the seed's DataParallel).
step train_ddp 40 "$R" --nproc "$n" "$B/examples/train_ddp" --steps 200 || status=1
grep -E "train_ddp:|final loss" "$O/train_ddp.log"
step seed_train 40 "$B/examples/seed_train" || status=1
grep -E "seed_train:|epoch 3  batch 10" "$O/seed_train.log"

# 4. Where the time of a small all-reduce goes, ours and torch's.
step breakdown 60 "$BP" --ember-run "$R" --sections breakdown --json "$O/breakdown.json" || status=1
step peer_breakdown 60 python3 benchmarks/peer_parallel.py --sections breakdown --json "$O/peer_breakdown.json" || status=1

# 5. The comparison, interleaved: ours and torch's alternate (and swap who goes
# first) so that drift of the machine hits both; REPS times each, fewer if the
# budget runs short (a pair's time is known after the first).
ours() { step "ours_$1" $((90 + 30 * n)) "$BP" --ember-run "$R" --sections group,dp,ar,ddp,zero --json "$O/ours_$1.json"; }
peer() { step "peer_$1" $((90 + 30 * n)) python3 benchmarks/peer_parallel.py --sections ar,ddp,zero,dp --json "$O/peer_$1.json"; }
socket_reserve=$((60 + 20 * n))
done_reps=0
pair=0
for ((i = 1; i <= REPS; i++)); do
  left=$((deadline - $(date +%s)))
  if ((i > 1 && left < pair + socket_reserve)); then
    echo "repetitions: stopping after $done_reps of $REPS (budget: ${left}s left, a pair takes ~${pair}s)"
    break
  fi
  t0=$(date +%s)
  if ((i % 2)); then
    ours "$i" || status=1
    peer "$i" || status=1
  else
    peer "$i" || status=1
    ours "$i" || status=1
  fi
  pair=$(($(date +%s) - t0))
  done_reps=$i
done
echo "$done_reps" >"$O/reps.txt"

# 6. The socket transport: ours and torch's all-reduce, our DDP.
step ours_socket $((40 + 20 * n)) env "${SOCKET_ENV[@]}" "$BP" --ember-run "$R" --sections ar,ddp --tag socket --iters 10 --json "$O/ours_socket.json" || status=1
step peer_socket $((40 + 20 * n)) env "${SOCKET_ENV[@]}" python3 benchmarks/peer_parallel.py --sections ar --tag socket --iters 10 --json "$O/peer_socket.json" || status=1

python3 tools/parallel_summary.py "$O" "$n" "$REPS"
echo "gpu_parallel: total $(($(date +%s) - start)) s, status $status"
exit $status
