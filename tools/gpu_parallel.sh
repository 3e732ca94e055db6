#!/usr/bin/env bash
# One call on the GPU machine for issue 6 (parallel/): with NCCL_NVLS_ENABLE=0 and
# every GPU present, runs
#   1. ember_tests_parallel in one process (DataParallel and NCCL all-reduce over
#      every GPU, DDP on one rank, the CPU tests) and under mpiexec -np <GPUs>
#      (DDP over NCCL one process per GPU, NCCL collectives against a CPU
#      reference, the NCCL timeout test; the CPU tests with <GPUs> ranks),
#   2. the rank-killed probe under ember-run (a rank SIGKILLed mid-run; 2+ GPUs),
#   3. examples/train_ddp under ember-run --nproc <GPUs>,
#   4. bench_parallel (which runs its DDP half under ember-run itself) and
#      benchmarks/peer_parallel.py (PyTorch: all_reduce, DDP, DataParallel),
# each under `timeout`, logs and JSON in $OUT/parallel/, then prints a summary:
# what ran and passed, ember vs PyTorch step time, busbw ours / raw NCCL / torch.
#   OUT=/tmp/out tools/gpu_parallel.sh [BUILD_DIR]      (default build-gpu, as
# built by tools/gpu_run.sh; the targets used are rebuilt first if out of date)
# Stays under ~240 s on 2 GPUs (EMBER_PAR_BUDGET seconds, default 235, caps every
# step's timeout). Exit status: non-zero when a test or a run failed.
set -u
B=${1:-build-gpu}
O="$(realpath -m "${OUT:-gpu-logs}")/parallel"
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0
# mpiexec as root, shared memory only, as CTest runs it (tests/CMakeLists.txt).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_mpi_yield_when_idle=1
start=$(date +%s)
# (More GPUs take longer: on more than 2 the default budget is 600 s.)
n_hint=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
deadline=$((start + ${EMBER_PAR_BUDGET:-$((n_hint > 2 ? 600 : 235))}))
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
    return
  fi
  local t0
  t0=$(date +%s)
  timeout -k 5 "$cap" "$@" >"$O/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" >>"$O/steps.tsv"
  local took=$(($(date +%s) - t0)) note=""
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
echo "gpu_parallel: $n GPU(s), build $B, logs in $O, NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
((n >= 1)) || { echo "no GPU visible; nothing to run"; exit 1; }

# The GPU image has no doctest: the caller carries it in .device/doctest (as gpu_run.sh).
if [ ! -f /usr/include/doctest/doctest.h ] && [ -d .device/doctest ]; then
  cp -r .device/doctest/include/doctest /usr/include/ && cp -r .device/doctest/cmake/doctest /usr/lib/cmake/
fi
if [ -f "$B/build.ninja" ] || [ -f "$B/Makefile" ]; then
  step build 150 cmake --build "$B" -j16 --target ember_tests_parallel bench_parallel ember-run train_ddp \
    || { status=1; tail -20 "$O/build.log"; }
fi
T=$B/tests/ember_tests_parallel
R=$B/ember-run
for f in "$T" "$R" "$B/examples/train_ddp" "$B/benchmarks/bench_parallel"; do
  [ -x "$f" ] || { echo "missing $f (build it: tools/gpu_run.sh, or cmake --build $B)"; status=1; }
done
MPIEXEC=$(command -v mpiexec || command -v mpirun || true)

# 1. Tests. One process: every GPU in DataParallel and in the one-thread NCCL group.
if [ -n "$MPIEXEC" ]; then
  step tests_np1 45 "$MPIEXEC" -np 1 --allow-run-as-root --oversubscribe "$T" --duration=true --no-colors=true || status=1
  # One process per GPU: DDP and the collectives over NCCL across processes.
  if ((n >= 2)); then
    step "tests_np$n" 70 "$MPIEXEC" -np "$n" --allow-run-as-root --oversubscribe "$T" --duration=true --no-colors=true || status=1
  fi
else
  echo "no mpiexec: the parallel tests need it (apt-get install openmpi-bin)"
  status=1
fi
grep -E "^\[doctest\] test cases|skipped|ERROR|FAILED" "$O"/tests_np*.log 2>/dev/null | sed "s|$O/||" | head -40

# 2. A rank killed mid-run (NCCL; skips itself with fewer than 2 GPUs).
step rank_killed 40 "$R" --nproc $((n >= 2 ? n : 2)) "$T" --rank-killed-probe
grep -E "rank-killed probe" "$O/rank_killed.log" | cut -c1-240
if grep -qE "too late|no error after|setup failed" "$O/rank_killed.log" ||
  ! grep -qE "rank-killed probe: (skipped|rank 0: failed in time)" "$O/rank_killed.log"; then
  echo "rank_killed: FAILED"
  status=1
fi

# 3. The example, one process per GPU.
step train_ddp 40 "$R" --nproc "$n" "$B/examples/train_ddp" --steps 200 || status=1
grep -E "train_ddp:|final loss" "$O/train_ddp.log"

# 4. Benchmarks: ember (DataParallel in one process, then DDP under ember-run), then PyTorch.
step bench_parallel $((60 + 20 * n)) "$B/benchmarks/bench_parallel" --ember-run "$R" --json "$O/bench_parallel.json" || status=1
step peer_parallel $((80 + 20 * n)) python3 benchmarks/peer_parallel.py --json "$O/peer_parallel.json" || status=1
grep -hE "^target|^DataParallel's group|^memory" "$O/bench_parallel.log" "$O/peer_parallel.log"

python3 - "$O" "$n" <<'EOF'
import json, os, re, sys
d, n = sys.argv[1], int(sys.argv[2])

def rows(name):
    p = os.path.join(d, name)
    try:
        return json.load(open(p))["rows"]
    except Exception:
        return []

ours, peer = rows("bench_parallel.json"), rows("peer_parallel.json")
def pick(rs, workload, shape, impl):
    return next((r for r in rs if r["workload"] == workload and r["shape"] == shape and r["impl"] == impl), None)
def gpus(k):
    return f"{k} GPU" if k == 1 else f"{k} GPUs"

gpu = open(os.path.join(d, "gpu.txt")).read().splitlines()
print(f"\n== gpu_parallel summary: {gpus(n)}; {gpu[1] if len(gpu) > 1 else ''}")
print("\nsteps (rc 0 = passed; rank_killed is judged by its lines, its rc is the killed rank's):")
for line in open(os.path.join(d, "steps.tsv")):
    name, rc, s = line.split("\t")
    extra = ""
    log = os.path.join(d, name + ".log")
    if os.path.exists(log):
        text = open(log, errors="replace").read()
        m = re.findall(r"\[doctest\] test cases:.*", text)
        extra = m[-1] if m else ""
        if name == "rank_killed":
            extra = "; ".join(re.findall(r"rank-killed probe: (rank \d+: [a-z ]+|skipped)", text)[:8])
    print(f"  {name:<16} rc={rc:<8} {s.strip():>4} s  {extra}")

print("\nMLP training step, 256 samples per GPU, fp32 (ratio = ember / PyTorch time, lower is better)")
print(f"| mode | GPUs | ember ms | PyTorch ms | ember/PyTorch | ember efficiency | PyTorch efficiency |")
print("|---|---|---|---|---|---|---|")
for wl, mode in (("mlp step DDP", "DDP"), ("mlp step DP", "DataParallel")):
    for k in range(1, n + 1):
        sh = f"{gpus(k)} x 256"
        a, b = pick(ours, wl, sh, "ember"), pick(peer, wl, sh, "torch")
        if not a and not b:
            continue
        f = lambda r: f"{r['ms']:.3f}" if r else "-"
        e = lambda r: r["note"].replace("efficiency ", "") if r else "-"
        ratio = f"{a['ms'] / b['ms']:.3f}" if a and b else "-"
        print(f"| {mode} | {k} | {f(a)} | {f(b)} | {ratio} | {e(a)} | {e(b)} |")

print(f"\nall-reduce busbw (GB/s; float32 sum, {gpus(n)}; with 1 GPU busbw is 0 by definition, see ms)")
print("| size | ember Communicator | raw NCCL (same comm) | ours/NCCL | ember group (DP) | raw NCCL group | torch.distributed | ember ms | NCCL ms | torch ms |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in ours:
    if r["workload"] != "all_reduce" or r["impl"] != "ember":
        continue
    sh = r["shape"]
    raw, g, rg, t = (pick(ours, "all_reduce", sh, "nccl"), pick(ours, "all_reduce", sh, "ember grp"),
                     pick(ours, "all_reduce", sh, "nccl grp"), pick(peer, "all_reduce", sh, "torch"))
    bw = lambda x: f"{x['rate']:.1f}" if x else "-"
    ms = lambda x: f"{x['ms']:.3f}" if x else "-"
    ratio = f"{raw['ms'] / r['ms']:.3f}" if raw else "-"
    print(f"| {sh.split(' x ')[0]} | {bw(r)} | {bw(raw)} | {ratio} | {bw(g)} | {bw(rg)} | {bw(t)} | {ms(r)} | {ms(raw)} | {ms(t)} |")

print("\ntargets:")
a256 = pick(ours, "all_reduce", f"256 MiB x {gpus(n)}", "ember")
n256 = pick(ours, "all_reduce", f"256 MiB x {gpus(n)}", "nccl")
if a256 and n256:
    ratio = n256["ms"] / a256["ms"]
    if n == 1:
        print(f"  all-reduce within 5% of NCCL's own bandwidth at 256 MiB: not measurable with 1 GPU "
              f"(busbw 0 by definition); time NCCL/ours {ratio:.3f}")
    else:
        print(f"  all-reduce within 5% of NCCL's own bandwidth at 256 MiB: ratio {ratio:.3f} "
              f"{'met' if ratio >= 0.95 else 'MISSED'} ({gpus(n)})")
else:
    print("  all-reduce at 256 MiB: no rows (bench_parallel's DDP half did not run)")
g256 = pick(ours, "all_reduce", f"256 MiB x {gpus(n)}", "ember grp")
r256 = pick(ours, "all_reduce", f"256 MiB x {gpus(n)}", "nccl grp")
if g256 and r256:
    print(f"  (DataParallel's one-process group all-reduce at 256 MiB: time NCCL/ours "
          f"{r256['ms'] / g256['ms']:.3f})")
for wl in ("mlp step DDP", "mlp step DP"):
    r = pick(ours, wl, f"{gpus(n)} x 256", "ember")
    if r:
        eff = float(r["note"].split()[-1])
        verdict = (f"{eff:.3f} {'met' if eff >= 0.95 else 'MISSED'}" if n >= 8 else
                   f"not measurable on {gpus(n)}; measured at {n}: {eff:.3f}")
        print(f"  {wl} scaling efficiency >= 0.95 at 8 GPUs: {verdict}")
a, b = pick(ours, "mlp step DDP", f"{gpus(n)} x 256", "ember"), pick(peer, "mlp step DDP", f"{gpus(n)} x 256", "torch")
if a and b:
    print(f"  step time <= PyTorch DDP's ({gpus(n)}): {a['ms']:.3f} vs {b['ms']:.3f} ms, ratio "
          f"{a['ms'] / b['ms']:.3f} {'met' if a['ms'] <= b['ms'] else 'MISSED'}")
EOF
echo "gpu_parallel: total $(($(date +%s) - start)) s, status $status"
exit $status
