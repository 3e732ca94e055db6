#!/usr/bin/env python3
"""The PyTorch peer of bench_gpt_ddp (issue 32): peer_gpt.py's GPT and step (bf16
autocast, clip_grad_norm_(1.0), AdamW lr 1e-3, betas 0.9/0.99) data-parallel, one
process per GPU, NCCL:

    torchrun --nproc_per_node N benchmarks/peer_gpt_ddp.py [--mode ddp|zero]
             [--reduce f32|bf16] [--only char|gpt2] [--json FILE] [--quick]

--mode ddp: torch.nn.parallel.DistributedDataParallel (25 MB buckets, gradients as
bucket views) and AdamW(fused=True); zero: the same DDP with
torch.distributed.optim.ZeroRedundancyOptimizer over AdamW(fused=True). --reduce
bf16: DDP's bf16_compress_hook. As bench_gpt_ddp: weight decay 0.1 on every
parameter (one group), dropout 0, each rank its own batch of 64 x 256 (char) or
16 x 1024 (GPT-2 124M) tokens; the step's wall time is each round's slowest rank,
the median over rounds; tokens/s per GPU; every rank's peak allocated memory.
Checked before timing: five steps on each rank's own batch leave the parameters
equal on every rank (a float64 checksum gathered from all) and lower the loss.
"""
import json
import math
import os
import sys
import time

from peer_gpt import arg, build_model

ROWS = []

WORKLOADS = {
    "char": dict(name="gpt char step", shape="6x384 T256 b64/rank", batch=64,
                 cfg=dict(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384,
                          dropout=0.0)),
    "gpt2": dict(name="gpt2-124M step", shape="12x768 T1024 b16/rank", batch=16,
                 cfg=dict(vocab_size=50304, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                          dropout=0.0)),
}


def gathered(torch, dist, value, dev):
    """This rank's value from every rank, in rank order."""
    t = torch.tensor([value], dtype=torch.float64, device=dev)
    out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return [v.item() for v in out]


def run(torch, dist, w, mode, reduce, quick, rank, world, dev):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.optim import ZeroRedundancyOptimizer
    cfg = w["cfg"]
    torch.manual_seed(1337)
    model = build_model(torch, cfg).to(dev)
    ddp = DDP(model, device_ids=[dev.index], bucket_cap_mb=25, gradient_as_bucket_view=True)
    if reduce == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    kw = dict(lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, fused=True)
    if mode == "zero":
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, **kw)
    else:
        opt = torch.optim.AdamW(ddp.parameters(), **kw)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randint(0, cfg["vocab_size"], (w["batch"], cfg["block_size"]), generator=g).to(dev)
    y = torch.randint(0, cfg["vocab_size"], (w["batch"], cfg["block_size"]), generator=g).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ddp(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
        return loss.detach()

    losses = [step().item() for _ in range(5)]
    with torch.no_grad():
        checksum = sum(p.double().pow(2).sum().item() for p in model.parameters())
    sums = gathered(torch, dist, checksum, dev)
    ok = all(s == sums[0] for s in sums) and all(math.isfinite(v) for v in losses) and \
        losses[-1] < losses[0]
    oks = gathered(torch, dist, 1.0 if ok else 0.0, dev)
    if rank == 0:
        print(f"validate {w['name']}: checksums {'equal' if len(set(sums)) == 1 else 'DIFFER'} "
              f"over {world} rank(s); rank 0 loss {losses[0]:.4f} -> {losses[-1]:.4f}"
              f"{'' if all(v == 1.0 for v in oks) else '  FAILED'}", flush=True)
    if not all(v == 1.0 for v in oks):
        return False
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    rounds = 3 if quick else 5
    steps = 3 if quick else (20 if w["batch"] == 64 else 10)
    per = []
    for _ in range(rounds):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        per.append(max(gathered(torch, dist, (time.perf_counter() - t0) * 1e3 / steps, dev)))
    peaks = gathered(torch, dist, float(torch.cuda.max_memory_allocated()), dev)
    per.sort()
    ms = per[len(per) // 2]
    if rank == 0:
        tok_s = w["batch"] * cfg["block_size"] / (ms / 1e3)
        impl = f"pytorch {'zero1' if mode == 'zero' else 'ddp'} x{world}" + \
            (" bf16-reduce" if reduce == "bf16" else "")
        note = "peak MiB per rank: " + " ".join(f"{p / 2**20:.1f}" for p in peaks)
        ROWS.append(dict(workload=w["name"], dtype="bf16", shape=w["shape"], impl=impl, ms=ms,
                         ms_min=per[0], ms_max=per[-1], rate=tok_s / 1e3, unit="ktok/s/GPU",
                         note=note))
        print(f"{w['name']:<22} bf16   {w['shape']:<22} {impl:<18} {ms:10.4f} "
              f"{tok_s / 1e3:8.1f} ktok/s/GPU [{per[0]:.4f}-{per[-1]:.4f}] {note}", flush=True)
    del opt, ddp, model
    torch.cuda.empty_cache()
    return True


def main():
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("peer_gpt_ddp: PyTorch is not installed; nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("peer_gpt_ddp: no CUDA device; nothing to measure")
        return 0
    if "RANK" not in os.environ:
        print("peer_gpt_ddp: run it under torchrun (RANK and WORLD_SIZE are not set)",
              file=sys.stderr)
        return 2
    mode, reduce, only = arg("--mode", "ddp"), arg("--reduce", "f32"), arg("--only", "")
    if mode not in ("ddp", "zero") or reduce not in ("f32", "bf16") or \
            only not in ("", "char", "gpt2"):
        print("usage: torchrun ... peer_gpt_ddp.py [--mode ddp|zero] [--reduce f32|bf16] "
              "[--only char|gpt2] [--json FILE] [--quick]", file=sys.stderr)
        return 2
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    torch.backends.cuda.matmul.allow_tf32 = True
    if rank == 0:
        print(f"peer_gpt_ddp: torch {torch.__version__}, {world} rank(s) on "
              f"{torch.cuda.get_device_name(local)}; {mode}, reduce {reduce}", flush=True)
    ok = True
    for key, w in WORKLOADS.items():
        if only and only != key:
            continue
        ok = run(torch, dist, w, mode, reduce, "--quick" in sys.argv, rank, world, dev) and ok
    json_path = arg("--json")
    if json_path and rank == 0:
        with open(json_path, "w") as f:
            json.dump({"benchmark": "gpt_ddp (PyTorch)", "rows": ROWS}, f, indent=1)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
