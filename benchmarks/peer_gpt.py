#!/usr/bin/env python3
"""The PyTorch peer of bench_gpt: the same GPT (examples/gpt_model.h, nanoGPT's
model with exact GELU, nn.GELU()'s default, and no biases) and the same training step -- bf16
autocast, clip_grad_norm_(1.0), AdamW(fused=True, lr 1e-3, betas 0.9/0.99,
weight decay 0.1 on 2-D parameters) -- timed the same way (wall clock, one
synchronize per round, median round), eager and under torch.compile, for the
char shape (6x384, T 256, batch 64, vocab 65, dropout 0.2) and GPT-2 124M's
(12x768, T 1024, batch 16, vocab 50304, dropout 0).

    python3 benchmarks/peer_gpt.py [--only char|gpt2] [--json FILE] [--quick] [--no-compile]
    python3 benchmarks/peer_gpt.py --parity FILE [--device cpu|cuda] [--tol 1e-4]
    python3 benchmarks/peer_gpt.py --sdpa FILE [--device cpu|cuda] [--tol 1e-5]
    python3 benchmarks/peer_gpt.py --only gpt2 --interleave 5 --ours 'build/benchmarks/bench_gpt --only gpt2'
    python3 benchmarks/peer_gpt.py --only char --profile [--no-compile]

--profile: torch.profiler over 3 steps (after warm-up) of one workload, under
torch.compile unless --no-compile: each GPU kernel's device time per step, sorted, so
ember's `bench_gpt --profile` table can be set beside PyTorch's.

--interleave REPS --ours CMD: one interleaved run against ember (see interleave()): the
PyTorch steps are built and compiled once; each repetition times them, then runs CMD.

--parity FILE: what `bench_gpt --parity FILE` wrote (ember's checkpoint format:
the initial weights, the batches data.x / data.y, ember's losses data.loss);
repeats the run in PyTorch from those weights (fp32, TF32 off, dropout 0) and
fails unless every step's loss agrees within --tol relative.
--sdpa FILE: what `bench_gpt --sdpa FILE` wrote (scaled_dot_product_attention
cases with ember's outputs and gradients), checked against PyTorch's math backend.
Before timing, each shape is validated: bf16's first loss within 1% of fp32's
and five steps on one batch lowering the loss (as bench_gpt does).
"""
import json
import math
import sys

from peer_common import read_ember_checkpoint
import time

ROWS = []


def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def to_torch(torch, entry):
    code, sizes, data = entry
    dtype = {0: torch.float32, 1: torch.float64, 2: torch.bfloat16, 3: torch.int64}[code]
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(sizes).clone()


def build_model(torch, cfg):
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(cfg["n_embd"], 3 * cfg["n_embd"], bias=False)
            self.c_proj = nn.Linear(cfg["n_embd"], cfg["n_embd"], bias=False)
            self.drop = nn.Dropout(cfg["dropout"])

        def forward(self, x):
            B, T, C = x.shape
            H = cfg["n_head"]
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=cfg["dropout"] if self.training
                                               else 0.0, is_causal=True)
            return self.drop(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(cfg["n_embd"], 4 * cfg["n_embd"], bias=False)
            self.c_proj = nn.Linear(4 * cfg["n_embd"], cfg["n_embd"], bias=False)
            self.drop = nn.Dropout(cfg["dropout"])

        def forward(self, x):
            return self.drop(self.c_proj(F.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(cfg["n_embd"], bias=False)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(cfg["n_embd"], bias=False)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
            self.wpe = nn.Embedding(cfg["block_size"], cfg["n_embd"])
            self.drop = nn.Dropout(cfg["dropout"])
            self.h = nn.ModuleList([Block() for _ in range(cfg["n_layer"])])
            self.ln_f = nn.LayerNorm(cfg["n_embd"], bias=False)
            self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as ember's
            for name, p in self.named_parameters():
                if "ln_" in name:
                    nn.init.ones_(p)
                elif name.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg["n_layer"]))
                else:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx, targets):
            T = idx.shape[1]
            pos = torch.arange(T, device=idx.device)
            x = self.drop(self.wte(idx) + self.wpe(pos))
            for b in self.h:
                x = b(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

    return GPT()


def make_optimizer(torch, model, fused):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99), eps=1e-8, fused=fused)


def parity(torch):
    path = arg("--parity")
    dev = torch.device(arg("--device", "cpu"))
    tol = float(arg("--tol", "1e-4"))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ck = read_ember_checkpoint(path)
    xs, ys = to_torch(torch, ck["data.x"]), to_torch(torch, ck["data.y"])
    ember_loss = to_torch(torch, ck["data.loss"]).tolist()
    steps, batch, block = xs.shape
    cfg = dict(vocab_size=ck["wte.weight"][1][0], block_size=block, n_layer=0, n_head=6,
               n_embd=ck["wte.weight"][1][1], dropout=0.0)
    cfg["block_size"] = ck["wpe.weight"][1][0]
    while f"h.{cfg['n_layer']}.ln_1.weight" in ck:
        cfg["n_layer"] += 1
    torch.manual_seed(0)
    model = build_model(torch, cfg)
    state = {k: to_torch(torch, v) for k, v in ck.items() if not k.startswith("data.")}
    state["lm_head.weight"] = state["wte.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    model.to(dev)
    assert model.lm_head.weight is model.wte.weight
    opt = make_optimizer(torch, model, fused=False)
    worst = 0.0
    print(f"parity: torch {torch.__version__} on {dev}, {steps} steps, batch {batch}, block {block}, "
          f"{cfg['n_layer']} layers, {cfg['n_embd']} dims")
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = model(xs[s].to(dev), ys[s].to(dev))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        got = loss.item()
        rel = abs(got - ember_loss[s]) / abs(ember_loss[s])
        worst = max(worst, rel)
        print(f"step {s:2d} torch {got:.7f} ember {ember_loss[s]:.7f} rel {rel:.2e}")
    ok = worst <= tol
    print(f"parity: {'OK' if ok else 'FAILED'}: largest relative loss difference {worst:.2e} "
          f"over {steps} steps (tolerance {tol:g})")
    return 0 if ok else 1


def sdpa_check(torch):
    """ember's scaled_dot_product_attention cases (bench_gpt --sdpa) against PyTorch's
    math backend in float32: output and gradients within --tol (default 1e-5) by
    ||ember - torch|| / ||torch||."""
    path = arg("--sdpa")
    dev = torch.device(arg("--device", "cpu"))
    tol = float(arg("--tol", "1e-5"))
    torch.backends.cuda.matmul.allow_tf32 = False
    ck = read_ember_checkpoint(path)
    names = sorted({k.rsplit(".", 1)[0] for k in ck})
    F = torch.nn.functional
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        math_only = lambda: sdpa_kernel(SDPBackend.MATH)  # noqa: E731
    except ImportError:
        math_only = lambda: torch.backends.cuda.sdp_kernel(  # noqa: E731
            enable_flash=False, enable_math=True, enable_mem_efficient=False)
    worst, ok = 0.0, True
    for n in names:
        t = {k.rsplit(".", 1)[1]: to_torch(torch, v) for k, v in ck.items() if k.rsplit(".", 1)[0] == n}
        q, k, v = (t[x].to(dev).requires_grad_(True) for x in ("q", "k", "v"))
        mask = t.get("mask")
        if mask is not None:
            mask = mask.to(torch.bool) if "mask_is_bool" in t else mask
            mask = mask.to(dev)
        causal = bool(t["causal"].item())
        if "keep" in t:
            # ember's keep-mask through the math backend's own dropout_mask argument.
            o = torch.ops.aten._scaled_dot_product_attention_math(
                q, k, v, attn_mask=mask, dropout_p=float(t["dropout_p"].item()), is_causal=causal,
                dropout_mask=t["keep"].to(torch.bool).to(dev))[0]
        else:
            with math_only():
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        (o * t["w"].to(dev)).sum().backward()
        for key, got in (("out", o), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
            ref = got.detach().double().cpu()
            rel = ((t[key].double() - ref).norm() / ref.norm()).item()
            worst = max(worst, rel)
            good = rel <= tol
            ok = ok and good
            print(f"sdpa {n:<16} {key:<3} rel. error {rel:.2e}{'' if good else '  FAILED'}")
    print(f"sdpa: {'OK' if ok else 'FAILED'}: {len(names)} cases, largest relative error "
          f"{worst:.2e} (tolerance {tol:g}) against PyTorch's math backend on {dev}")
    return 0 if ok else 1


WORKLOADS = {
    "char": dict(name="gpt char step", shape="6x384 T256 b64", batch=64,
                 cfg=dict(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384,
                          dropout=0.2)),
    "gpt2": dict(name="gpt2-124M step", shape="12x768 T1024 b16", batch=16,
                 cfg=dict(vocab_size=50304, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                          dropout=0.0)),
}


def flops_per_token(cfg, n_params):
    return 6 * n_params + 12 * cfg["n_layer"] * cfg["n_head"] * (cfg["n_embd"] // cfg["n_head"]) * \
        cfg["block_size"]


def prepare(torch, w, compiled):
    """The model, optimizer and batch of workload w, and its training step (eager or
    under torch.compile); None when the eager validation (as bench_gpt's) fails."""
    dev = torch.device("cuda:0")
    cfg = w["cfg"]
    torch.manual_seed(1337)
    model = build_model(torch, cfg).to(dev)
    opt = make_optimizer(torch, model, fused=True)
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, cfg["vocab_size"], (w["batch"], cfg["block_size"]), generator=g).to(dev)
    y = torch.randint(0, cfg["vocab_size"], (w["batch"], cfg["block_size"]), generator=g).to(dev)
    fwd = torch.compile(model) if compiled else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    if not compiled:  # validation, as bench_gpt's
        with torch.no_grad():
            l32 = model(x, y).item()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                l16 = model(x, y).item()
        losses = [step().item() for _ in range(5)]
        ok = abs(l16 - l32) <= 1e-2 * l32 and all(math.isfinite(v) for v in losses) and \
            losses[-1] < losses[0]
        print(f"validate {w['name']}: fp32 first loss {l32:.5f}, bf16 {l16:.5f}; bf16 steps on one "
              f"batch {losses[0]:.4f} -> {losses[-1]:.4f}{'' if ok else '  FAILED'}")
        if not ok:
            return None
    for _ in range(3 if not compiled else 5):  # compiling happens here
        step()
    torch.cuda.synchronize()
    return model, step


def steps_per_round(w, quick):
    """bench_gpt's steps per timed round: 20 for the char shape (batch 64), 10 for GPT-2."""
    return 3 if quick else (20 if w["batch"] == 64 else 10)


def step_rounds(torch, w, step, rounds, steps):
    """Sorted per-round milliseconds per step: `rounds` rounds of `steps` steps, one
    synchronize per round (bench_gpt's wall_ms)."""
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) * 1e3 / steps)
    return sorted(per)


def time_workload(torch, w, compiled, quick):
    prepared = prepare(torch, w, compiled)
    if prepared is None:
        return False
    model, step = prepared
    cfg = w["cfg"]
    torch.cuda.reset_peak_memory_stats()
    rounds = 3 if quick else 5
    per = step_rounds(torch, w, step, rounds, steps_per_round(w, quick))
    ms = per[len(per) // 2]
    peak = torch.cuda.max_memory_allocated()
    n_params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    tok_s = w["batch"] * cfg["block_size"] / (ms / 1e3)
    tflops = flops_per_token(cfg, n_params) * tok_s / 1e12
    impl = "torch.compile" if compiled else "eager"
    note = f"{tflops:.1f} TFLOP/s, peak {peak / 2**20:.0f} MiB, {n_params / 1e6:.2f}M params"
    ROWS.append(dict(workload=w["name"], dtype="bf16", shape=w["shape"], impl=impl, ms=ms,
                     ms_min=per[0], ms_max=per[-1], rate=tok_s / 1e3, unit="ktok/s", note=note))
    print(f"{w['name']:<22} {'bf16':<6} {w['shape']:<22} {impl:<14} {ms:10.4f} {tok_s / 1e3:8.1f} "
          f"ktok/s [{per[0]:.4f}-{per[-1]:.4f}] {note}", flush=True)
    return True


def interleave(torch, key, reps, ours):
    """--interleave REPS --ours CMD: PyTorch's eager and compiled steps of one workload
    stay built in this process (compiled once), and each repetition times both (bench_gpt's
    rounds and steps), then runs CMD (a bench_gpt command line; --json FILE is appended)
    as its own process and reads its rows. Prints each repetition's times and, per ember
    row, the median and range of ours / PyTorch's best (the faster of eager and compile in
    that repetition) and ours / torch.compile, over the repetitions."""
    import os
    import shlex
    import statistics
    import subprocess
    import tempfile
    w = WORKLOADS[key]
    steps = steps_per_round(w, False)
    eager = prepare(torch, w, False)
    compiled = prepare(torch, w, True)
    if eager is None or compiled is None:
        return 1
    per_rep = []
    for r in range(1, reps + 1):
        t_eager = step_rounds(torch, w, eager[1], 5, steps)[2]
        t_comp = step_rounds(torch, w, compiled[1], 5, steps)[2]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ours.json")
            run = subprocess.run(shlex.split(ours) + ["--json", path], capture_output=True, text=True)
            if run.returncode != 0 or not os.path.exists(path):
                print(f"interleave: repetition {r}: `{ours}` failed (exit {run.returncode}):\n"
                      f"{run.stdout[-2000:]}{run.stderr[-2000:]}")
                return 1
            with open(path) as f:
                rows = [row for row in json.load(f)["rows"] if row["workload"].startswith(w["name"])]
        if not rows:
            print(f"interleave: repetition {r}: `{ours}` printed no row for {w['name']}")
            return 1
        # bench_gpt's rows: "<name>" (eager) and "<name> graphed"
        ours_ms = {"ember " + (row["workload"][len(w["name"]):].strip() or "eager"): row["ms"]
                   for row in rows}
        per_rep.append((t_eager, t_comp, ours_ms))
        print(f"rep {r}: torch eager {t_eager:.3f} ms, torch.compile {t_comp:.3f} ms, " +
              ", ".join(f"{k} {v:.3f} ms" for k, v in ours_ms.items()), flush=True)

    def med_range(values):
        return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"

    print(f"{w['name']}, {reps} repetitions (ours and PyTorch alternate):")
    print(f"  torch eager {med_range([e for e, _, _ in per_rep])} ms; "
          f"torch.compile {med_range([c for _, c, _ in per_rep])} ms")
    for impl in per_rep[0][2]:
        mine = [o[impl] for _, _, o in per_rep if impl in o]
        best = [o[impl] / min(e, c) for e, c, o in per_rep if impl in o]
        comp = [o[impl] / c for _, c, o in per_rep if impl in o]
        print(f"  {impl}: {med_range(mine)} ms; / PyTorch's best {med_range(best)}; "
              f"/ torch.compile {med_range(comp)}")
    return 0


def profile(torch, key, compiled):
    """--profile: the device time per step of each kernel of workload key's step,
    from torch.profiler over 3 steps, largest first, and their sum."""
    from torch.profiler import ProfilerActivity
    w = WORKLOADS[key]
    prepared = prepare(torch, w, compiled)
    if prepared is None:
        return 1
    step, steps = prepared[1], 3
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = {}
    for ev in prof.events():
        # (a GPU user annotation such as "Optimizer.step#AdamW.step" spans kernels: not one)
        if ev.device_type == torch.autograd.DeviceType.CUDA and \
                not getattr(ev, "is_user_annotation", False) and "#" not in ev.name:
            t = kernels.setdefault(ev.name, [0, 0.0])
            t[0] += 1
            t[1] += ev.time_range.elapsed_us()
    total = sum(t for _, t in kernels.values())
    impl = "torch.compile" if compiled else "eager"
    print(f"profile {w['name']} ({impl}): {len(kernels)} kernels, "
          f"{sum(c for c, _ in kernels.values()) / steps:.0f} launches and "
          f"{total / steps / 1e3:.3f} ms of device time per step")
    print(f"{'us/step':>9} {'calls/step':>10} {'share':>6}  kernel")
    for name, (calls, t) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:45]:
        print(f"{t / steps:9.1f} {calls / steps:10.1f} {100 * t / total:5.1f}%  {name[:150]}")
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=60))
    return 0


def main():
    try:
        import torch
    except ImportError:
        print("peer_gpt: PyTorch is not installed; nothing to measure")
        return 0 if "--parity" not in sys.argv and "--sdpa" not in sys.argv else 1
    if "--parity" in sys.argv:
        return parity(torch)
    if "--sdpa" in sys.argv:
        return sdpa_check(torch)
    if not torch.cuda.is_available():
        print("peer_gpt: no CUDA device; nothing to measure")
        return 0
    quick = "--quick" in sys.argv
    only = arg("--only", "")
    print(f"peer_gpt: torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    if "--profile" in sys.argv:
        if only not in WORKLOADS:
            print(f"peer_gpt: --profile needs --only char|gpt2, got --only {only!r}")
            return 2
        return profile(torch, only, "--no-compile" not in sys.argv)
    if "--interleave" in sys.argv:
        reps, ours = arg("--interleave"), arg("--ours")
        if only not in WORKLOADS or ours is None or not (reps or "").isdigit() or int(reps) < 1:
            print("peer_gpt: --interleave REPS needs --only char|gpt2 and --ours 'COMMAND', "
                  f"got --interleave {reps!r} --only {only!r} --ours {ours!r}")
            return 2
        return interleave(torch, only, int(reps), ours)
    ok = True
    for key, w in WORKLOADS.items():
        if only and only != key:
            continue
        ok = time_workload(torch, w, False, quick) and ok
        if "--no-compile" not in sys.argv:
            ok = time_workload(torch, w, True, quick) and ok
        torch.cuda.empty_cache()
    json_path = arg("--json")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"benchmark": "gpt (PyTorch)", "rows": ROWS}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
