#!/usr/bin/env bash
# The GPT on several GPUs (issue 32), for a machine of 2 or more GPUs: for 1 GPU and for
# every GPU, for DDP and ZeRO-1, REPS repetitions of bench_gpt_ddp under ember-run
# then benchmarks/peer_gpt_ddp.py under torchrun (alternating, one process group each),
# then one table: step ms, tokens/s per GPU, scaling efficiency (tokens/s per GPU on N
# over that on 1, each side against its own one-GPU run), peak allocated memory per GPU
# and ember / PyTorch. NCCL_NVLS_ENABLE=0 always.
#   tools/gpu_gpt_ddp.sh [BUILD_DIR (default build-gpu)]
#   EMBER_DDP_REPS=5  EMBER_DDP_ONLY=gpt2|char (default both)  EMBER_DDP_REDUCE=f32|bf16
#   EMBER_DDP_TIMEOUT=300 seconds per process group
# Logs and JSON in $OUT (or ./gpu-logs)/gpt_ddp.
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-gpu}"
out="$(realpath -m "${OUT:-gpu-logs}")/gpt_ddp"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
reps="${EMBER_DDP_REPS:-5}"
reduce="${EMBER_DDP_REDUCE:-f32}"
only=()
[ -n "${EMBER_DDP_ONLY:-}" ] && only=(--only "$EMBER_DDP_ONLY")
limit="${EMBER_DDP_TIMEOUT:-300}"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$gpus" -ge 1 ] || { echo "gpu_gpt_ddp: no GPU here" >&2; exit 1; }
counts=(1)
[ "$gpus" -gt 1 ] && counts+=("$gpus")
echo "gpu_gpt_ddp: $gpus GPU(s), runs at ${counts[*]} GPU(s), $reps repetition(s), reduce $reduce"
status=0
for n in "${counts[@]}"; do
  for mode in ddp zero; do
    for ((r = 1; r <= reps; ++r)); do
      tag="n${n}-${mode}-rep${r}"
      timeout "$limit" "$build/ember-run" --nproc "$n" "$build/benchmarks/bench_gpt_ddp" --mode "$mode" \
        --reduce "$reduce" "${only[@]}" --json "$out/ember-$tag.json" >"$out/ember-$tag.txt" 2>&1 ||
        { echo "bench_gpt_ddp failed: $tag"; tail -5 "$out/ember-$tag.txt"; status=1; }
      timeout "$limit" torchrun --standalone --nproc_per_node "$n" benchmarks/peer_gpt_ddp.py \
        --mode "$mode" --reduce "$reduce" "${only[@]}" --json "$out/peer-$tag.json" \
        >"$out/peer-$tag.txt" 2>&1 ||
        { echo "peer_gpt_ddp.py failed: $tag"; tail -5 "$out/peer-$tag.txt"; status=1; }
    done
  done
done
python3 - "$out" "$reps" "${counts[@]}" <<'PY' | tee "$out/table.md"
import glob, json, os, statistics, sys
out, reps, counts = sys.argv[1], int(sys.argv[2]), [int(c) for c in sys.argv[3:]]
def rows(side, n, mode, rep):
    p = os.path.join(out, f"{side}-n{n}-{mode}-rep{rep}.json")
    return {r["workload"]: r for r in json.load(open(p))["rows"]} if os.path.exists(p) else {}
def med(v):
    return f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})" if v else "-"
print("| workload | mode | GPUs | ember ms | PyTorch ms | ember / PyTorch per rep | ember tok/s/GPU (k) "
      "| ember scaling | PyTorch scaling | ember peak MiB per GPU | PyTorch peak MiB per GPU |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
names = sorted({w for n in counts for m in ("ddp", "zero") for r in range(1, reps + 1)
                for w in rows("ember", n, m, r)})
for w in names:
    for mode in ("ddp", "zero"):
        base = {}
        for n in counts:
            e = [rows("ember", n, mode, r).get(w) for r in range(1, reps + 1)]
            p = [rows("peer", n, mode, r).get(w) for r in range(1, reps + 1)]
            em = [x["ms"] for x in e if x]; pm = [x["ms"] for x in p if x]
            ratio = [a["ms"] / b["ms"] for a, b in zip(e, p) if a and b]
            et = [x["rate"] for x in e if x]; pt = [x["rate"] for x in p if x]
            if n == counts[0]:
                base = {"e": statistics.median(et) if et else None,
                        "p": statistics.median(pt) if pt else None}
            def eff(v, b):
                return f"{statistics.median(v) / b:.3f} ({min(v) / b:.3f}-{max(v) / b:.3f})" if v and b else "-"
            note = lambda x: x[0]["note"].replace("peak MiB per rank: ", "") if x and x[0] else "-"
            print(f"| {w} | {mode} | {n} | {med(em)} | {med(pm)} | {med(ratio)} | {med(et)} | "
                  f"{eff(et, base['e'])} | {eff(pt, base['p'])} | {note(e)} | {note(p)} |")
PY
exit $status
