#!/usr/bin/env python3
"""The PyTorch peer of bench_conv (benchmarks/conv.cpp): the same workloads with
cuDNN, channels_last, benchmark mode, TF32 for fp32 (PyTorch's cuDNN default) and
bf16 tensors for the bf16 rows; CUDA-event medians, the same row names and JSON.

    python3 benchmarks/peer_conv.py [--json FILE] [--quick]
"""
import json
import sys

from peer_common import event_ms

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("peer_conv: no torch, nothing to measure")
    sys.exit(0)

ROWS = []
QUICK = "--quick" in sys.argv
ITERS = 5 if QUICK else 20


def spread_ms(f, warmup=3, iters=ITERS):
    return event_ms(torch, f, warmup, iters)


def add(workload, dtype, shape, ms, rate, unit, note=""):
    med, lo, hi = ms
    ROWS.append(dict(workload=workload, dtype=dtype, shape=shape, impl="pytorch", ms=med,
                     ms_min=lo, ms_max=hi, rate=rate(med) if callable(rate) else rate, unit=unit,
                     note=note))
    print(f"{workload:<22} {dtype:<6} {shape:<22} {'pytorch':<10} {med:10.4f} [{lo:.4f}-{hi:.4f}] {note}",
          flush=True)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.sc = None
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (self.sc(x) if self.sc is not None else x))


class ResNet8(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        self.layers = nn.Sequential(Block(64, 64, 1), Block(64, 128, 2), Block(128, 256, 2))
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        y = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


def main():
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    b, c, s = 128, 64, 32
    flops = 2.0 * b * s * s * c * c * 9
    shape = "128x64x32x32 k3"
    print(f"peer_conv: torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for name, dtype in (("tf32", torch.float32), ("bf16", torch.bfloat16)):
        x = torch.randn(b, c, s, s, device=dev, dtype=dtype).to(memory_format=torch.channels_last)
        w = (torch.randn(c, c, 3, 3, device=dev, dtype=dtype) / 24).to(memory_format=torch.channels_last)
        dy = torch.randn(b, c, s, s, device=dev, dtype=dtype).to(memory_format=torch.channels_last)
        x.requires_grad_(True)
        w.requires_grad_(True)
        ref = F.conv2d(x.double(), w.double(), padding=1)
        err = ((F.conv2d(x, w, padding=1).double() - ref).norm() / ref.norm()).item()
        print(f"validate conv fwd {name}: rel err {err:.2e}")
        if not err < (5e-3 if name == "tf32" else 2e-2):
            print("VALIDATION FAILED")
            sys.exit(1)

        def fwd():
            with torch.no_grad():
                F.conv2d(x, w, padding=1)

        def fwd_bwd():
            torch.autograd.grad(F.conv2d(x, w, padding=1), (x, w), dy)

        add("conv3x3 fwd", name, shape, spread_ms(fwd), lambda ms: flops / ms / 1e9, "TFLOP/s")
        add("conv3x3 fwd+bwd", name, shape, spread_ms(fwd_bwd), lambda ms: 3 * flops / ms / 1e9,
            "TFLOP/s")

    x = torch.randn(b, c, s, s, device=dev, requires_grad=True)
    wgt = (torch.randn(c, device=dev) * 0.1 + 1).requires_grad_(True)
    bias = torch.randn(c, device=dev).requires_grad_(True)
    dy = torch.randn(b, c, s, s, device=dev)

    def bn():
        torch.autograd.grad(F.batch_norm(x, None, None, wgt, bias, training=True), (x, wgt, bias), dy)

    add("batch_norm2d fwd+bwd", "f32", "128x64x32x32", spread_ms(bn),
        lambda ms: 5 * 4.0 * b * c * s * s / ms / 1e6, "GB/s", "5 accesses/elem")

    torch.manual_seed(8)
    model = ResNet8().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images = torch.randn(b, 3, s, s, device=dev).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (b,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        return loss

    first = step().item()
    for _ in range(8):
        step()
    last = step().item()
    print(f"validate resnet8: loss {first:.4f} -> {last:.4f} over 10 steps on one batch")
    if not last < first:
        print("VALIDATION FAILED")
        sys.exit(1)
    add("resnet8 step", "tf32", "b128 3x32x32", spread_ms(step), 0, "", "SGD momentum")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        add("resnet8 step", "bf16", "b128 3x32x32", spread_ms(step), 0, "", "autocast")

    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump({"benchmark": "peer_conv", "rows": ROWS}, f, indent=1)


if __name__ == "__main__":
    main()
