#!/usr/bin/env python3
"""ember's fused attention against PyTorch's scaled_dot_product_attention, in one process.

Loads the shared library tools/attention_probe.sh builds ($OUT/libember_attention_probe.so,
tools/attention_capi.cu) through ctypes and, for each shape, on the same bf16 (B, H, T, D)
tensors:
  - checks ours and torch's flash backend against torch's float32 math backend on the first
    (b, h) slices (||x - ref|| / ||ref|| for O, dQ, dK, dV; <= 1e-2 passes);
  - "ours" is the library's default (on compute capability 9.0 the wgmma forward, the
    deterministic backward), "ours_v1" the mma.sync forward (version 1);
  - times forward and forward+backward of ours, torch flash and torch cuDNN (where torch
    runs it), alternating them rep by rep (CUDA events, median of PEER_REPS, default 25);
  - prints TFLOP/s (4 B H T^2 D forward, /2 causal, x3.5 forward+backward) and ours over
    the best torch backend's time (< 1: ours faster).
Without the library it times torch alone. Exit status 1 when a check failed.
"""
import ctypes
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(8, 16, 1024, 64), (8, 16, 2048, 128), (16, 12, 1024, 64), (4, 16, 4096, 64),
          (2, 16, 8192, 128)]
REPS = max(5, int(os.environ.get("PEER_REPS", "25")))
TOL = 1e-2


def load_ours():
    path = os.path.join(os.environ.get("OUT", "probe-out"), "libember_attention_probe.so")
    if not os.path.exists(path):
        print(f"(no {path}: torch alone)")
        return None
    lib = ctypes.CDLL(path)
    lib.ember_attention_workspace.restype = ctypes.c_size_t
    lib.ember_attention_workspace.argtypes = [ctypes.c_int] * 6
    return lib


def strides(t):  # (B, H, T, D) tensor -> (b, h, t) element strides as long long[3]
    return (ctypes.c_longlong * 3)(t.stride(0), t.stride(1), t.stride(2))


class Ours:
    def __init__(self, lib, q, k, v, causal):
        self.lib, self.q, self.k, self.v, self.causal = lib, q, k, v, causal
        b, h, t, d = q.shape
        self.dims = (b, h, t, k.shape[2], d)
        self.scale = ctypes.c_float(1.0 / math.sqrt(d))
        self.o = torch.empty_like(q)
        self.lse = torch.empty(b, h, t, device=q.device, dtype=torch.float32)
        self.dq, self.dk, self.dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        ws = max(lib.ember_attention_workspace(*self.dims, 0),
                 lib.ember_attention_workspace(*self.dims, 1))
        self.ws = torch.empty(ws + 256, device=q.device, dtype=torch.uint8)
        self.ws_bytes = ctypes.c_size_t(ws)

    def stream(self):
        return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def forward(self):
        p = ctypes.c_void_p
        rc = self.lib.ember_attention_forward(
            *self.dims, self.scale, int(self.causal), p(self.q.data_ptr()), strides(self.q),
            p(self.k.data_ptr()), strides(self.k), p(self.v.data_ptr()), strides(self.v),
            p(self.o.data_ptr()), strides(self.o), p(self.lse.data_ptr()), self.stream())
        assert rc == 0

    def forward_v1(self):
        p = ctypes.c_void_p
        rc = self.lib.ember_attention_forward_v1(
            *self.dims, self.scale, int(self.causal), p(self.q.data_ptr()), strides(self.q),
            p(self.k.data_ptr()), strides(self.k), p(self.v.data_ptr()), strides(self.v),
            p(self.o.data_ptr()), strides(self.o), p(self.lse.data_ptr()), self.stream())
        assert rc == 0

    def backward(self, dout, deterministic=True):
        p = ctypes.c_void_p
        rc = self.lib.ember_attention_backward(
            *self.dims, self.scale, int(self.causal), p(self.q.data_ptr()), strides(self.q),
            p(self.k.data_ptr()), strides(self.k), p(self.v.data_ptr()), strides(self.v),
            p(self.o.data_ptr()), strides(self.o), p(dout.data_ptr()), strides(dout),
            p(self.lse.data_ptr()), p(self.dq.data_ptr()), strides(self.dq),
            p(self.dk.data_ptr()), strides(self.dk), p(self.dv.data_ptr()), strides(self.dv),
            int(deterministic), p(self.ws.data_ptr()), self.ws_bytes, self.stream())
        assert rc == 0


def torch_step(backend, q, k, v, dout, causal, backward):
    with sdpa_kernel(backend):
        if not backward:
            with torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal), None
        q.grad = k.grad = v.grad = None
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        o.backward(dout)
        return o, (q.grad, k.grad, v.grad)


def rel(x, ref):
    x, ref = x.float(), ref.float()
    if not torch.isfinite(x).all():
        return float("inf")
    return ((x - ref).norm() / ref.norm()).item()


def check(ours, q, k, v, dout, causal, slices):
    """Errors of ours and torch flash against float32 math on the first slices."""
    def sl(t):
        return t.reshape(-1, *t.shape[2:])[:slices].unsqueeze(0).detach()
    qr, kr, vr = (sl(t).float().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
        o.backward(sl(dout).float())
    ref = (o, qr.grad, kr.grad, vr.grad)
    rows = {}
    if ours is not None:
        ours.o.fill_(float("nan"))
        ours.dq.fill_(float("nan"))
        ours.forward()
        ours.backward(dout)
        rows["ours"] = [rel(sl(x), r) for x, r in zip((ours.o, ours.dq, ours.dk, ours.dv), ref)]
        ours.o.fill_(float("nan"))
        ours.forward_v1()
        rows["ours_v1(fwd)"] = [rel(sl(ours.o), ref[0])]
        ours.forward()  # leave the default forward's output for the timing's backward
    o, (gq, gk, gv) = torch_step(SDPBackend.FLASH_ATTENTION, q, k, v, dout, causal, True)
    rows["flash"] = [rel(sl(x), r) for x, r in zip((o, gq, gk, gv), ref)]
    return rows


def time_pair(fns, reps):
    """Median ms of each callable, alternating them rep by rep."""
    for f in fns.values():
        for _ in range(3):
            f()
    torch.cuda.synchronize()
    ms = {name: [] for name in fns}
    for _ in range(reps):
        for name, f in fns.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            f()
            b.record()
            b.synchronize()
            ms[name].append(a.elapsed_time(b))
    return {name: statistics.median(v) for name, v in ms.items()}


def backend_runs(backend, q, k, v, dout, causal):
    try:
        torch_step(backend, q, k, v, dout, causal, True)
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001 - any refusal means the backend is not a peer here
        return False


def main():
    lib = load_ours()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, reps {REPS}")
    failed = 0
    table = []
    for (b, h, t, d) in SHAPES:
        for causal in (True, False):
            torch.manual_seed(b * 100003 + t + d + causal)
            q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
                       .requires_grad_(True) for _ in range(3))
            dout = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
            ours = Ours(lib, q.detach(), k.detach(), v.detach(), causal) if lib else None
            name = f"B{b} H{h} T{t} D{d} {'causal' if causal else 'full'}"
            errs = check(ours, q, k, v, dout, causal, 1 if t >= 4096 else 2)
            v1_ok = all(e <= TOL for e in errs.get("ours_v1(fwd)", [1.0]))
            ok = all(e <= TOL for who, row in errs.items() if who != "ours_v1(fwd)" for e in row)
            failed += (not ok) + (ours is not None and not v1_ok)
            print(f"CHECK {name}: " + " | ".join(
                f"{who} " + " ".join(f"{n} {x:.2e}" for n, x in zip(("O", "dQ", "dK", "dV"), e))
                for who, e in errs.items()) + ("  PASS" if ok and v1_ok else "  FAIL"))
            flop = 4.0 * b * h * t * t * d * (0.5 if causal else 1.0)
            backends = {"flash": SDPBackend.FLASH_ATTENTION}
            if backend_runs(SDPBackend.CUDNN_ATTENTION, q, k, v, dout, causal):
                backends["cudnn"] = SDPBackend.CUDNN_ATTENTION
            for bwd in (False, True):
                fns = {}
                if ours is not None and ok:
                    if bwd:
                        fns["ours"] = lambda: (ours.forward(), ours.backward(dout))
                    else:
                        fns["ours"] = ours.forward
                        if v1_ok:
                            fns["ours_v1"] = ours.forward_v1
                for bn, be in backends.items():
                    fns[bn] = (lambda be=be: torch_step(be, q, k, v, dout, causal, bwd))
                ms = time_pair(fns, REPS)
                f = flop * (3.5 if bwd else 1.0)
                best = min(v for n, v in ms.items() if not n.startswith("ours"))
                line = f"PEER {name:26s} {'fwd+bwd' if bwd else 'fwd    '}: " + "  ".join(
                    f"{n} {v:.3f} ms ({f / v / 1e9:.0f} TF/s)" for n, v in ms.items())
                for n in ("ours", "ours_v1"):
                    if n in ms:
                        line += f"  {n}/best-torch {ms[n] / best:.2f}"
                print(line, flush=True)
                table.append(line)
            del ours, q, k, v, dout
            torch.cuda.empty_cache()
    print("== summary")
    for line in table:
        print(line)
    print(f"peer: {failed} failed check(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
