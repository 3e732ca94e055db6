#!/usr/bin/env python3
"""The PyTorch peer of bench_train_step: the same training steps, timed the same
way (wall clock over many steps, one synchronize per round, median round).

    python3 benchmarks/peer_train_step.py [--json FILE] [--quick] [--digits-init FILE]

seed: nn.Linear(10, 10), MSELoss, Adam(lr=1e-2, fused=True) (ember's Adam is one
      fused kernel too), batch 32 -- eager, eager with torch.cuda.empty_cache()
      every step, and the step captured in a CUDA graph (Adam fused and
      capturable) and replayed after copying the batch in; also PyTorch's default
      Adam (foreach), as an extra row.
mlp:  4 x Linear(4096, 4096) with ReLU between, batch 8192, MSELoss on a fixed
      teacher network's outputs (as bench_train_step), fused Adam (lr=1e-3): fp32
      (TF32 off), TF32 on, bf16 autocast.
digits: bench_digits_mlp's step (64-128-64-10 MLP with ReLU, cross-entropy, Adam
      lr=1e-3, batch 64, UCI digits), from the initial weights bench_digits_mlp
      wrote (--digits-init, ember's checkpoint format) on the same batches; first
      validated (300 steps on the GPU against a float64 CPU run: loss to 1e-3,
      accuracy to one example), then timed eager and captured in a CUDA graph.
Rows carry the same workload/dtype/shape/impl keys as bench_train_step's and
bench_digits_mlp's, with the median round and the fastest and slowest (ms_min, ms_max).
    --only seed|mlp|digits   one workload (compare.sh's interleaved runs); digits
                             needs --digits-init, and runs by default when it is given
"""
import os
import json
import sys

from peer_common import read_ember_checkpoint
import time

ROWS = []


def add(workload, dtype, shape, impl, spread, rate, unit, note=""):
    ms, lo, hi = spread
    ROWS.append(dict(workload=workload, dtype=dtype, shape=shape, impl=impl, ms=ms, ms_min=lo,
                     ms_max=hi, rate=rate, unit=unit, note=note))
    print(f"{workload:<22} {dtype:<6} {shape:<22} {impl:<18} {ms:10.4f} {rate:8.1f} {unit:<4} "
          f"[{lo:.4f}-{hi:.4f}] {note}", flush=True)


def main():
    quick = "--quick" in sys.argv
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
    json_path = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    try:
        import torch
    except ImportError:
        print("peer_train_step: PyTorch is not installed; nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("peer_train_step: no CUDA device; nothing to measure")
        return 0
    nn = torch.nn
    dev = torch.device("cuda:0")
    print(f"peer_train_step: torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    print(f"\ntrain_step: PyTorch, wall time per step\n{'workload':<22} {'dtype':<6} {'shape':<22} "
          f"{'impl':<18} {'ms':>10} {'rate':>12}  note")
    rounds, steps = (3, 50) if quick else (7, 200)


    nbatch = 16

    def seed(**adam_kwargs):
        torch.manual_seed(0)
        model = nn.Linear(10, 10).to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, **adam_kwargs)
        crit = nn.MSELoss()
        m = torch.randn(10, 10)
        xs, ys = [], []
        for _ in range(nbatch):
            x = torch.randn(32, 10)
            xs.append(x.to(dev))
            ys.append((x @ m + 0.1 * torch.randn(32, 10)).to(dev))

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = crit(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return step, xs, ys

    if only == "digits":
        return finish(torch, quick, json_path)
    if only not in ("", "seed"):
        return mlp(torch, nn, dev, quick, json_path)
    step, xs, ys = seed(fused=True)
    ms = timed(torch, lambda i: step(xs[i % nbatch], ys[i % nbatch]), 20, rounds, steps)
    add("seed step", "f32", "32x10->10", "eager", ms, 1 / ms[0], "k/s", "Adam(fused=True)")
    step, xs, ys = seed()
    ms = timed(torch, lambda i: step(xs[i % nbatch], ys[i % nbatch]), 20, rounds, steps)
    add("seed step", "f32", "32x10->10", "eager foreach Adam", ms, 1 / ms[0], "k/s",
        "Adam default (foreach)")
    step, xs, ys = seed(fused=True)

    def with_empty_cache(i):
        loss = step(xs[i % nbatch], ys[i % nbatch])
        del loss
        torch.cuda.empty_cache()
    ms = timed(torch, with_empty_cache, 20, rounds, steps)
    add("seed step", "f32", "32x10->10", "eager+empty_cache", ms, 1 / ms[0], "k/s",
        "Adam(fused=True), del + empty_cache()")

    step, xs, ys = seed(fused=True, capturable=True)
    sx, sy = xs[0].clone(), ys[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as the CUDA graphs docs ask
        for i in range(3):
            step(xs[i], ys[i])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = step(sx, sy)

    def replay(i):
        sx.copy_(xs[i % nbatch])
        sy.copy_(ys[i % nbatch])
        graph.replay()
    ms = timed(torch, replay, 5, rounds, steps * 5)
    add("seed step", "f32", "32x10->10", "graphed", ms, 1 / ms[0], "k/s", "Adam(fused, capturable)")
    del static_loss
    if only == "seed":
        return write(json_path)  # the digits workload runs only by default or on its own
    return mlp(torch, nn, dev, quick, json_path)


def write(json_path):
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"benchmark": "train_step (PyTorch)", "rows": ROWS}, f, indent=1)
    return 0


def mlp(torch, nn, dev, quick, json_path):
    def layers_of(seed):
        torch.manual_seed(seed)
        layers = []
        for i in range(4):
            layers.append(nn.Linear(4096, 4096))
            if i < 3:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers).to(dev)

    batch = 8192
    flops = 2.0 * batch * 4096 * 4096 * 11
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(3)
    x = torch.randn(batch, 4096, device=dev)
    with torch.no_grad():
        y = layers_of(2)(x)  # the teacher's outputs: the loss depends on the network
    for mode in ("f32", "tf32", "bf16"):
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        net = layers_of(1)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3, fused=True)
        crit = nn.MSELoss()

        def mlp_step(_):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
                loss = crit(net(x), y)
            loss.backward()
            opt.step()
        ms = timed(torch, mlp_step, 2, 3 if quick else 5, 3 if quick else 10)
        add("mlp step", mode, "4x4096, batch 8192", "eager", ms, flops / ms[0] / 1e9, "TF/s",
            "autocast(bf16)" if mode == "bf16" else "")
        del net, opt
        torch.cuda.empty_cache()
    torch.backends.cuda.matmul.allow_tf32 = False
    return finish(torch, quick, json_path)


def finish(torch, quick, json_path):
    """The digits workload when --digits-init is given, then the JSON."""
    ok = True
    if "--digits-init" in sys.argv:
        ok = digits(torch, sys.argv[sys.argv.index("--digits-init") + 1], 3 if quick else 7,
                    100 if quick else 500)
    return max(write(json_path), 0 if ok else 1)


def timed(torch, f, warmup, rounds, steps):
    """Wall ms per step: (median round, fastest, slowest), one synchronize per round."""
    for i in range(warmup):
        f(i)
    torch.cuda.synchronize()
    per, it = [], 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            f(it)
            it += 1
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) * 1e3 / steps)
    per.sort()
    return per[len(per) // 2], per[0], per[-1]


def digits(torch, init_path, rounds, steps):
    nn = torch.nn
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    rows = [list(map(float, line.split(","))) for line in
            open(os.path.join(root, "examples", "data", "digits", "digits.csv"))]
    train = [r for i, r in enumerate(rows) if i % 5 != 0]
    test = [r for i, r in enumerate(rows) if i % 5 == 0]
    init = read_ember_checkpoint(init_path)

    def run(device, dtype):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                              nn.Linear(64, 10))
        with torch.no_grad():
            for name, p in model.state_dict().items():
                code, sizes, data = init[name]
                assert code == 0 and list(p.shape) == sizes, name
                p.copy_(torch.frombuffer(bytearray(data), dtype=torch.float32).view(sizes))
        model = model.to(device=device, dtype=dtype)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3,
                               fused=device.type == "cuda")
        n = len(train)
        tx = torch.tensor([r[:64] for r in train], dtype=torch.float64) / 16
        ty = torch.tensor([int(r[64]) for r in train])
        xs, ys = [], []
        for b in range((n + 63) // 64):
            idx = torch.tensor([(b * 64 + k) % n for k in range(64)])
            xs.append(tx[idx].to(device=device, dtype=dtype))
            ys.append(ty[idx].to(device))
        crit = nn.CrossEntropyLoss()

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = crit(model(x), y)
            loss.backward()
            opt.step()
            return loss

        def accuracy():
            with torch.no_grad():
                ex = (torch.tensor([r[:64] for r in test], dtype=torch.float64) / 16).to(device, dtype)
                pred = model(ex).argmax(1).cpu()
            return (pred == torch.tensor([int(r[64]) for r in test])).double().mean().item()
        return step, xs, ys, accuracy

    dev = torch.device("cuda:0")
    step, xs, ys, acc = run(dev, torch.float32)
    rstep, rxs, rys, racc = run(torch.device("cpu"), torch.float64)
    for s in range(300):
        loss = step(xs[s % len(xs)], ys[s % len(ys)]).item()
        rloss = rstep(rxs[s % len(rxs)], rys[s % len(rys)]).item()
    a, ra = acc(), racc()
    rel = abs(loss - rloss) / abs(rloss)
    ok = rel <= 1e-3 and abs(a - ra) <= 1 / 360 + 1e-12 and a >= 0.9
    print(f"validate digits: after 300 steps loss {loss:.6f} (float64 reference {rloss:.6f}, "
          f"rel. diff {rel:.1e}), test accuracy {a:.4f} (reference {ra:.4f})"
          f"{'' if ok else '  FAILED'}", flush=True)
    note = f"loss {loss:.4f} acc {a:.4f} after 300 steps"

    step, xs, ys, _ = run(dev, torch.float32)
    ms = timed(torch, lambda i: step(xs[i % len(xs)], ys[i % len(ys)]), 20, rounds, steps)
    add("digits mlp step", "f32", "64-128-64-10, b64", "eager", ms, 1 / ms[0], "k/s", note)

    # Graphed: fused, capturable Adam; warm-up on a side stream as the docs ask.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                          nn.Linear(64, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True, capturable=True)
    crit = nn.CrossEntropyLoss()
    sx, sy = xs[0].clone(), ys[0].clone()

    def gstep():
        opt.zero_grad(set_to_none=True)
        loss = crit(model(sx), sy)
        loss.backward()
        opt.step()
        return loss
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            gstep()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = gstep()

    def replay(i):
        sx.copy_(xs[i % len(xs)])
        sy.copy_(ys[i % len(ys)])
        graph.replay()
    ms = timed(torch, replay, 5, rounds, steps)
    add("digits mlp step", "f32", "64-128-64-10, b64", "graphed", ms, 1 / ms[0], "k/s",
        "Adam(fused, capturable)")
    del static_loss
    return ok


if __name__ == "__main__":
    sys.exit(main())
