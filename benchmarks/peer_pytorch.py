#!/usr/bin/env python3
"""The PyTorch peer of bench_linear, bench_mse, bench_adam, bench_cross_entropy and
bench_layer_norm: the same shapes and workloads, timed the same way (CUDA events,
warm-up, median), printed in the same table format, so one call on the GPU machine
runs both sides.

    python3 benchmarks/peer_pytorch.py [--json FILE] [--only linear,mse,adam,cross_entropy,layer_norm]
    python3 benchmarks/peer_pytorch.py --only elementwise    (bench_elementwise's peer)
"""
import json
import sys

from peer_common import event_ms

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("peer_pytorch: no torch, nothing to measure")
    sys.exit(0)

ROWS = []


def median_ms(f, warmup, iters):
    return event_ms(torch, f, warmup, iters)[0]


def add(workload, dtype, shape, impl, ms, rate, unit, note=""):
    ROWS.append(dict(workload=workload, dtype=dtype, shape=shape, impl=impl, ms=ms, rate=rate,
                     unit=unit, note=note))
    print(f"{workload:<22} {dtype:<6} {shape:<22} {impl:<10} {ms:10.4f} {rate:8.1f} {unit:<4} {note}",
          flush=True)


def header(title):
    print(f"\n{title}\n{'workload':<22} {'dtype':<6} {'shape':<22} {'impl':<10} {'ms':>10} "
          f"{'rate':>12}  note")


def bench_linear():
    header("linear: PyTorch (F.linear)")
    # bench_linear's list (benchmarks/linear.cpp, kShapes): keep the two in step.
    shapes = [(8192, 4096, 4096, True), (8192, 8192, 8192, True), (4096, 4096, 4096, True),
              (2048, 2048, 2048, True), (1024, 1024, 1024, True), (256, 1024, 1024, True),
              (4097, 4096, 4095, True), (4097, 4097, 4097, False), (256, 256, 256, True),
              (64, 128, 128, True), (32, 10, 10, True)]
    for mode in ("f32", "tf32", "bf16"):
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        dtype = torch.bfloat16 if mode == "bf16" else torch.float32
        for m, k, n, backward in shapes:
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
            b = torch.randn(n, device="cuda", dtype=dtype)
            dy = torch.randn(m, n, device="cuda", dtype=dtype)
            shape = f"{m}x{k}->{n}"
            flops = 2.0 * m * n * k
            iters = 10 if flops > 5e11 else 30
            with torch.no_grad():
                ms = median_ms(lambda: F.linear(x, w, b), 3, iters)
            add("fwd", mode, shape, "pytorch", ms, flops / ms / 1e9, "TF/s")
            if not backward:
                continue
            xr, wr, br = (t.detach().requires_grad_(True) for t in (x, w, b))

            def step():
                y = F.linear(xr, wr, br)
                torch.autograd.grad(y, (xr, wr, br), dy)

            ms = median_ms(step, 3, iters)
            add("fwd+bwd op", mode, shape, "pytorch", ms, 3 * flops / ms / 1e9, "TF/s")
    torch.backends.cuda.matmul.allow_tf32 = False


def bench_mse():
    header("mse: PyTorch (F.mse_loss + autograd.grad), 2^28 elements")
    n = 1 << 28
    a = torch.randn(n, device="cuda")
    c = torch.empty_like(a)
    ms = median_ms(lambda: c.copy_(a), 5, 50)
    copy = 2.0 * a.numel() * 4 / ms / 1e6
    add("d2d copy", "f32", "2^28", "pytorch", ms, copy, "GB/s", "read + write")
    for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        p = torch.randn(n, device="cuda", dtype=dtype).requires_grad_(True)
        t = torch.randn(n, device="cuda", dtype=dtype)

        def step():
            loss = F.mse_loss(p, t)
            torch.autograd.grad(loss, (p,))

        ms = median_ms(step, 5, 30)
        rate = 3.0 * n * p.element_size() / ms / 1e6
        add("mse_loss fwd+bwd op", name, "2^28", "pytorch", ms, rate, "GB/s",
            f"{rate / copy:.2f} of copy (3 accesses/elem)")


def bench_adam():
    # The optimizers bench_adam times, as users call them: step() of Adam, AdamW
    # (weight_decay 1e-2) and SGD with momentum 0.9, each fused (ember's are fused
    # kernels too); Adam's default foreach path as an extra row.
    header("optimizer step(): PyTorch, fused")
    makers = (
        ("adam", 28, lambda p, **kw: torch.optim.Adam(p, lr=1e-3, **kw)),
        ("adamw", 28, lambda p, **kw: torch.optim.AdamW(p, lr=1e-3, weight_decay=1e-2, **kw)),
        ("sgd", 20, lambda p, **kw: torch.optim.SGD(p, lr=1e-2, momentum=0.9, **kw)),
    )
    for name, sizes in (("mlp 4x4096", [4096 * 4096, 4096] * 4), ("512 x 32768", [32768] * 512)):
        params = [torch.randn(s, device="cuda").requires_grad_(True) for s in sizes]
        for p in params:
            p.grad = torch.randn_like(p)
        total = sum(sizes)
        runs = [(impl, bpe, make, dict(fused=True)) for impl, bpe, make in makers]
        runs.append(("adam foreach", 28, makers[0][2], dict(foreach=True)))
        for impl, bpe, make, kw in runs:
            note = ", ".join(f"{k}=True" for k in kw)
            try:
                opt = make(params, **kw)
                opt.step()
            except (RuntimeError, TypeError) as e:  # an older torch without this fused optimizer
                opt = make(params, foreach=True)
                note = f"foreach=True (fused: {type(e).__name__})"
            ms = median_ms(opt.step, 5, 50)
            add(name, "f32", f"{len(sizes)} tensors", impl, ms, bpe * total / ms / 1e6, "GB/s", note)


def check(name, err, tol):
    """Prints the check of a peer row against float64; False when it fails."""
    print(f"validate {name}: rel err {err:.2e}")
    if not err <= tol:
        print("VALIDATION FAILED")
        return False
    return True


def rel_err(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def bench_cross_entropy():
    header("cross_entropy: PyTorch (F.cross_entropy + autograd.grad), 8192 x 32768")
    n, c = 8192, 32768
    a = torch.randn(n * c, device="cuda")
    b = torch.empty_like(a)
    ms = median_ms(lambda: b.copy_(a), 5, 50)
    copy = 2.0 * a.numel() * 4 / ms / 1e6
    add("d2d copy", "f32", "8192x32768", "pytorch", ms, copy, "GB/s", "read + write")
    del a, b
    t = torch.randint(0, c, (n,), device="cuda")
    ok = True
    for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        x = (torch.randn(n, c, device="cuda") * 2.0).to(dtype).requires_grad_(True)
        x64 = x.detach().double().requires_grad_(True)
        ref = F.cross_entropy(x64, t)
        (g64,) = torch.autograd.grad(ref, (x64,))
        loss = F.cross_entropy(x, t)
        (g,) = torch.autograd.grad(loss, (x,))
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        if not (check(f"{name} loss", rel_err(loss, ref), tol) and
                check(f"{name} gradient", rel_err(g, g64), tol)):
            ok = False
            continue
        del x64, ref, g64, g

        def step():
            loss = F.cross_entropy(x, t)
            torch.autograd.grad(loss, (x,))

        ms = median_ms(step, 5, 30)
        rate = 2.0 * n * c * x.element_size() / ms / 1e6
        add("cross_entropy fwd+bwd op", name, "8192x32768", "pytorch", ms, rate, "GB/s",
            f"{rate / copy:.2f} of copy (read logits, write grad)")
    return ok


def bench_layer_norm():
    header("layer_norm: PyTorch (F.layer_norm + autograd.grad of x, w, b), 8192 x 4096")
    n, c = 8192, 4096
    a = torch.randn(n * c, device="cuda")
    b = torch.empty_like(a)
    ms = median_ms(lambda: b.copy_(a), 5, 100)
    copy = 2.0 * a.numel() * 4 / ms / 1e6
    add("d2d copy", "f32", "8192x4096", "pytorch", ms, copy, "GB/s", "read + write")
    ok = True
    for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        x = (torch.randn(n, c, device="cuda") * 3.0 + 1.0).to(dtype).requires_grad_(True)
        w = (torch.randn(c, device="cuda") * 0.5 + 1.0).to(dtype).requires_grad_(True)
        bias = torch.randn(c, device="cuda").to(dtype).requires_grad_(True)
        dy = torch.randn(n, c, device="cuda").to(dtype)
        leaves64 = [v.detach().double().requires_grad_(True) for v in (x, w, bias)]
        y64 = F.layer_norm(leaves64[0], (c,), leaves64[1], leaves64[2])
        ref = torch.autograd.grad(y64, leaves64, dy.double())
        y = F.layer_norm(x, (c,), w, bias)
        got = torch.autograd.grad(y, (x, w, bias), dy)
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        worst = max([rel_err(y, y64)] + [rel_err(p, q) for p, q in zip(got, ref)])
        if not check(f"{name} layer_norm", worst, tol):
            ok = False
            continue

        def step():
            y = F.layer_norm(x, (c,), w, bias)
            torch.autograd.grad(y, (x, w, bias), dy)

        ms = median_ms(step, 5, 100)
        rate = 5.0 * n * c * x.element_size() / ms / 1e6
        add("layer_norm fwd+bwd op", name, "8192x4096", "pytorch", ms, rate, "GB/s",
            f"{rate / copy:.2f} of copy (5 accesses/elem)")
    return ok


def bench_elementwise():
    """bench_elementwise's cases (benchmarks/elementwise.cpp): GPT-2's element-wise work."""
    header("element-wise: GPT-2's step, B 16 x T 1024 x C 768 (PyTorch)")
    B, T, C, H, D = 16, 1024, 768, 12, 64
    n = B * T * C
    a = torch.randn(n, device="cuda")
    b = torch.empty_like(a)
    ms = median_ms(lambda: b.copy_(a), 5, 100)
    copy = 2.0 * a.numel() * 4 / ms / 1e6
    add("d2d copy", "f32", "16x1024x768", "pytorch", ms, copy, "GB/s", "read + write")
    x = torch.randn(B, T, C, device="cuda")
    y = torch.randn(B, T, C, device="cuda")
    h = torch.randn(B, T, C, device="cuda").bfloat16()
    g4 = torch.randn(B, T, 4 * C, device="cuda").bfloat16()
    pre4 = torch.randn(B, T, 4 * C, device="cuda").bfloat16()
    heads = torch.randn(B, H, T, D, device="cuda").bfloat16()
    qkv = torch.randn(B, T, 3 * C, device="cuda").bfloat16()
    part = qkv[..., C:2 * C]
    cases = [
        ("add", "f32", 12, lambda: x + y, lambda: x.double() + y.double(), 1e-6),
        ("add f32+bf16 (residual)", "mixed", 10, lambda: x + h, lambda: x.double() + h.double(),
         1e-6),
        ("cast f32->bf16", "f32", 6, lambda: x.bfloat16(), lambda: x.double(), 1e-2),
        ("cast bf16->f32", "bf16", 6, lambda: h.float(), lambda: h.double(), 0.0),
        ("gelu backward (B,T,4C)", "bf16", 24, lambda: torch.ops.aten.gelu_backward(g4, pre4),
         lambda: torch.ops.aten.gelu_backward(g4.double(), pre4.double()), 1e-2),
        ("heads (B,H,T,D)->(B,T,H,D)", "bf16", 4, lambda: heads.transpose(1, 2).contiguous(),
         lambda: heads.double().transpose(1, 2), 0.0),
    ]
    ok = True
    with torch.no_grad():
        for name, dtype, per, f, ref, tol in cases:
            if not check(f"{name} ({dtype})", rel_err(f(), ref()), tol):
                ok = False
                continue
            ms = median_ms(f, 5, 50)
            rate = per * n / ms / 1e6
            add(name, dtype, "16x1024x768", "pytorch", ms, rate, "GB/s", f"{rate / copy:.2f} of copy")
        start = part.double().clone()
        part.add_(h)
        if check("grad into a slice of (B,T,3C) (bf16)",
                 rel_err(part, start + h.double()), 1e-2):
            ms = median_ms(lambda: part.add_(h), 5, 50)
            rate = 6 * n / ms / 1e6
            add("grad into a slice of (B,T,3C)", "bf16", "16x1024x768", "pytorch", ms, rate, "GB/s",
                f"{rate / copy:.2f} of copy")
        else:
            ok = False
    return ok


def main():
    if not torch.cuda.is_available():
        print("peer_pytorch: no CUDA device, nothing to measure")
        return 0
    print(f"peer_pytorch: torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    benches = {"linear": bench_linear, "mse": bench_mse, "adam": bench_adam,
               "cross_entropy": bench_cross_entropy, "layer_norm": bench_layer_norm,
               "elementwise": bench_elementwise}
    only = [b for b in benches if b != "elementwise"]  # that one with --only (compare.sh's set)
    if "--only" in sys.argv:
        only = sys.argv[sys.argv.index("--only") + 1].split(",")
        unknown = [b for b in only if b not in benches]
        if unknown:
            print(f"peer_pytorch: unknown benchmark(s) {unknown}; choose from {list(benches)}")
            return 2
    status = 0
    for name in only:
        if benches[name]() is False:
            status = 1
    if "--json" in sys.argv:
        path = sys.argv[sys.argv.index("--json") + 1]
        with open(path, "w") as f:
            json.dump({"benchmark": "peer_pytorch", "torch": torch.__version__,
                       "gpu": torch.cuda.get_device_name(0), "rows": ROWS}, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
