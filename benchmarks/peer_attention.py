#!/usr/bin/env python3
"""The PyTorch peer of bench_attention (benchmarks/attention.cpp): F.scaled_dot_product_attention
on the same bf16 (B, H, T, D) shapes, causal and not, forward and forward+backward, with
each of torch's flash and cuDNN backends that accepts the shape; the row is the faster
backend's (its name in the note). Each backend is checked first against torch's float32
math backend on the (0, 0) slice (relative error <= 1e-2, as ember's check); CUDA-event
medians, the same row names and JSON as bench_attention.

    python3 benchmarks/peer_attention.py [--json FILE] [--quick]
"""
import json
import sys

from peer_common import event_ms

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    print("peer_attention: no torch, nothing to measure")
    sys.exit(0)

SHAPES = [(8, 16, 1024, 64), (8, 16, 2048, 128), (16, 12, 1024, 64), (4, 16, 4096, 64),
          (2, 16, 8192, 128)]
ROWS = []
QUICK = "--quick" in sys.argv
ITERS = 5 if QUICK else 20
TOL = 1e-2


def spread_ms(f, warmup=3, iters=ITERS):
    return event_ms(torch, f, warmup, iters)


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def main():
    if not torch.cuda.is_available():
        print("peer_attention: no CUDA device")
        return 0
    torch.manual_seed(27)
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    failed = 0
    for b, h, t, d in SHAPES:
        for causal in (True, False):
            shape = f"B{b} H{h} T{t} D{d} {'causal' if causal else 'full'}"
            flop = 4.0 * b * h * t * t * d * (0.5 if causal else 1.0)
            q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
                       .requires_grad_(True) for _ in range(3))
            dy = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
            # The float32 math reference of the (0, 0) slice.
            qr, kr, vr = (x[:1, :1].detach().float().requires_grad_(True) for x in (q, k, v))
            with sdpa_kernel(SDPBackend.MATH):
                o_ref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
            o_ref.backward(dy[:1, :1].float())
            best = {}
            for name, be in backends.items():
                try:
                    with sdpa_kernel(be):
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        gq, gk, gv = torch.autograd.grad(o, (q, k, v), dy)
                except RuntimeError as e:  # the backend refuses the shape or the GPU
                    print(f"{shape}: torch {name} not run ({str(e).splitlines()[0][:80]})")
                    continue
                errs = [rel(x[:1, :1], r) for x, r in
                        zip((o, gq, gk, gv), (o_ref, qr.grad, kr.grad, vr.grad))]
                print(f"validate torch {name:5s} {shape:<26} O {errs[0]:.2e} dQ {errs[1]:.2e} "
                      f"dK {errs[2]:.2e} dV {errs[3]:.2e}", flush=True)
                if max(errs) > TOL:
                    print("VALIDATION FAILED")
                    failed += 1
                    continue

                def fwd(be=be):
                    with torch.no_grad(), sdpa_kernel(be):
                        F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def fwd_bwd(be=be):
                    with sdpa_kernel(be):
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        torch.autograd.grad(o, (q, k, v), dy)

                for workload, f in (("attention fwd", fwd), ("attention fwd+bwd", fwd_bwd)):
                    s = spread_ms(f)
                    if workload not in best or s[0] < best[workload][1][0]:
                        best[workload] = (name, s)
            for workload, (name, (med, lo, hi)) in best.items():
                f = flop * (3.5 if workload.endswith("bwd") else 1.0)
                ROWS.append(dict(workload=workload, dtype="bf16", shape=shape, impl="pytorch",
                                 ms=med, ms_min=lo, ms_max=hi, rate=f / med / 1e9,
                                 unit="TFLOP/s", note=f"torch {name}"))
                print(f"{workload:<22} {'bf16':<6} {shape:<26} {'pytorch':<10} {med:10.4f} "
                      f"[{lo:.4f}-{hi:.4f}] torch {name}", flush=True)
            del q, k, v, dy
            torch.cuda.empty_cache()
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump({"benchmark": "peer_attention", "rows": ROWS}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
