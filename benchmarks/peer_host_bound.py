#!/usr/bin/env python3
"""Python PyTorch on ember's host-bound rows other than the seed step
(peer_train_step.py --only seed has that): per-op overhead (bench_op_overhead's
add rows) and Linear at small shapes (bench_linear_small), timed as ember and
peer_libtorch time them.

    python3 benchmarks/peer_host_bound.py [--out DIR]

add: a + b of two [16] tensors on cuda:0 without and with requires_grad, and [16],
     [4096] on the CPU (and [4096] on cuda:0): host ns per op, median of 50 batches
     of 200 calls, each batch followed by an untimed synchronize.
linear: F.linear forward (no_grad) and forward + autograd.grad(x, w, b) at
     32x10->10, 64x128->128, 256x256->256, fp32 (TF32 off): CUDA-event median of
     30 calls after 3, with the range.
Each is checked first against float64 (a failed check writes no row and exits 1).
Writes DIR/py_op_overhead.json and DIR/py_linear_small.json.
"""
import json
import os
import statistics
import sys
import time

from peer_common import event_ms


def main():
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "."
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("peer_host_bound: PyTorch is not installed; nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("peer_host_bound: no CUDA device; nothing to measure")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"peer_host_bound: torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    ok = True

    def host_ns(f, after, batch=200, batches=50):
        for _ in range(batch):
            f()
        after()
        ns = []
        for _ in range(batches):
            t0 = time.perf_counter_ns()
            for _ in range(batch):
                f()
            ns.append((time.perf_counter_ns() - t0) / batch)
            after()
        return statistics.median(ns)

    ops = []
    for dev, n in (("cpu", 16), ("cpu", 4096), ("cuda:0", 16), ("cuda:0", 4096)):
        torch.manual_seed(0)
        a, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
        ga, gb = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
        want = a.double().cpu() + b.double().cpu()
        c = ga + gb
        right = (torch.allclose((a + b).double().cpu(), want, rtol=1e-6, atol=0) and
                 torch.allclose(c.detach().double().cpu(), want, rtol=1e-6, atol=0) and
                 c.grad_fn is not None)
        if not right:
            print(f"validate add on {dev} [{n}]: FAILED")
            ok = False
            continue
        after = torch.cuda.synchronize if dev != "cpu" else (lambda: None)
        for what, x, y in (("add, no grad", a, b), ("add, inputs require grad", ga, gb)):
            ns = host_ns(lambda: x + y, after)
            ops.append(dict(workload=what, device=dev, shape=f"[{n}]", host_ns_per_op=ns,
                            ratio_to_bare_launch=0))
            print(f"{what:<34} {dev:<7} [{n}]{'':<3} {ns:10.0f} ns", flush=True)


    lin = []
    for m, k, n in ((32, 10, 10), (64, 128, 128), (256, 256, 256)):
        torch.manual_seed(1)
        x = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda") / k ** 0.5
        b = torch.randn(n, device="cuda")
        dy = torch.randn(m, n, device="cuda")
        shape = f"{m}x{k}->{n}"
        xr, wr, br = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
        y = F.linear(xr, wr, br)
        g = torch.autograd.grad(y, (xr, wr, br), dy)
        d = lambda t: t.detach().double().cpu()  # noqa: E731

        def rel(got, want):
            return ((d(got) - want).norm() / want.norm()).item()
        err = max(rel(y, d(x) @ d(w).t() + d(b)), rel(g[0], d(dy) @ d(w)),
                  rel(g[1], d(dy).t() @ d(x)), rel(g[2], d(dy).sum(0)))
        print(f"validate linear {shape}: forward and gradients against float64, rel err {err:.2e}"
              f"{'' if err <= 1e-5 else '  FAILED'}")
        if not err <= 1e-5:
            ok = False
            continue
        flops = 2.0 * m * n * k
        with torch.no_grad():
            med, lo, hi = event_ms(torch, lambda: F.linear(x, w, b), 3, 30)
        lin.append(dict(workload="fwd", dtype="f32", shape=shape, impl="pytorch", ms=med, ms_min=lo,
                        ms_max=hi, rate=flops / med / 1e9, unit="TF/s", note="F.linear"))

        def step():
            yy = F.linear(xr, wr, br)
            torch.autograd.grad(yy, (xr, wr, br), dy)
        med, lo, hi = event_ms(torch, step, 3, 30)
        lin.append(dict(workload="fwd+bwd op", dtype="f32", shape=shape, impl="pytorch", ms=med,
                        ms_min=lo, ms_max=hi, rate=3 * flops / med / 1e9, unit="TF/s",
                        note="F.linear + autograd.grad"))
        for r in lin[-2:]:
            print(f"{r['workload']:<22} f32    {shape:<14} {r['ms']:10.4f} [{r['ms_min']:.4f}-{r['ms_max']:.4f}]",
                  flush=True)

    with open(os.path.join(out, "py_op_overhead.json"), "w") as f:
        json.dump({"benchmark": "op_overhead (PyTorch)", "torch": torch.__version__, "rows": ops}, f,
                  indent=1)
    with open(os.path.join(out, "py_linear_small.json"), "w") as f:
        json.dump({"benchmark": "linear small shapes (PyTorch)", "torch": torch.__version__,
                   "rows": lin}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
