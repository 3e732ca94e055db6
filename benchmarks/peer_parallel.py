#!/usr/bin/env python3
"""The PyTorch peer of bench_parallel, on the same machine in the same run:

  1. torch.distributed all_reduce (NCCL, one process per GPU, float32 sum),
     1 MiB .. 256 MiB: median time, algbw and busbw = algbw * 2(n-1)/n;
  2. the same MLP training step (2048-8192-8192-2048, ReLU, MSE mean loss, plain
     SGD lr 1e-3, fp32 without TF32, 256 samples per GPU) under
     DistributedDataParallel on k = 1..N GPUs (a process group over ranks 0..k-1;
     default buckets: 25 MiB, first 1 MiB, as ember's), efficiency per k;
  3. the same step under torch.nn.DataParallel in one process (k = 1..N).

Times are wall clock around the call plus torch.cuda.synchronize(), the median
of 20 after 3 warm-ups, as bench_parallel does. Rows print in the benchmarks'
table format, and --json FILE writes them as the other benches do.

    python3 benchmarks/peer_parallel.py [--json FILE] [--quick]

Without torch, CUDA or NCCL it says so and exits 0.
"""
import json
import os
import socket
import statistics
import sys
import tempfile
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("peer_parallel: no torch, nothing to measure (exit 0)")
    sys.exit(0)

PER_GPU, WIDTH, LR = 256, 2048, 1e-3
TITLE = "peer_parallel: PyTorch"


def gpus(k):
    return f"{k} GPU" if k == 1 else f"{k} GPUs"


def make_mlp():
    return nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.ReLU(), nn.Linear(4 * WIDTH, 4 * WIDTH),
                         nn.ReLU(), nn.Linear(4 * WIDTH, WIDTH))


def median_s(f, iters):
    samples = []
    for it in range(iters + 3):
        t0 = time.perf_counter()
        f()
        if it >= 3:
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def header():
    print(f"\n{TITLE}\n{'workload':<22} {'dtype':<6} {'shape':<22} {'impl':<10} {'ms':>10} "
          f"{'rate':>12}  note", flush=True)


def row(workload, shape, impl, s, rate, unit, note):
    r = dict(workload=workload, dtype="f32", shape=shape, impl=impl, ms=s * 1e3, rate=rate,
             unit=unit, note=note)
    print(f"{workload:<22} {'f32':<6} {shape:<22} {impl:<10} {r['ms']:10.4f} {rate:8.1f} "
          f"{unit:<4} {note}", flush=True)
    return r


def scaling_rows(workload, impl, points):
    """points: [(k, seconds)]; rows with samples/s and efficiency, then the target line."""
    one = PER_GPU / points[0][1]
    rows = []
    for k, s in points:
        rate = PER_GPU * k / s
        rows.append(row(workload, f"{gpus(k)} x 256", impl, s, rate, "samp/s",
                        f"efficiency {rate / (k * one):.3f}"))
    k, s = points[-1]
    eff = PER_GPU * k / s / (k * one)
    if k >= 8:
        print(f"target (for reference, PyTorch): {workload} scaling efficiency >= 0.95 at 8 GPUs: "
              f"{eff:.3f} (measured at {k})")
    else:
        print(f"target (for reference, PyTorch): {workload} scaling efficiency at 8 GPUs not "
              f"measurable on {gpus(k)}; measured at {k}: {eff:.3f}")
    return rows


def worker(rank, n, iters, out_path):
    """One process per GPU: all_reduce busbw, then the DDP step for k = 1..n."""
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=n,
                                device_id=dev)
    except TypeError:  # torch before 2.3: no device_id
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=n)
    rows = []
    if rank == 0:
        header()
    t256 = None
    bytes_ = 1 << 20
    while bytes_ <= 256 << 20:
        count = bytes_ // 4
        t = torch.full((count,), rank + 1.0, device=dev)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        if t[-1].item() != n * (n + 1) / 2:
            raise RuntimeError(f"all_reduce: rank {rank} got {t[-1].item()}, "
                               f"expected {n * (n + 1) / 2}")
        t.zero_()

        def once():
            dist.all_reduce(t)
            torch.cuda.synchronize()

        s = median_s(once, iters)
        algbw = bytes_ / s / 1e9
        if rank == 0:
            rows.append(row("all_reduce", f"{bytes_ >> 20} MiB x {gpus(n)}", "torch", s,
                            algbw * 2 * (n - 1) / n, "GB/s", f"algbw {algbw:.1f} GB/s"))
        t256 = s
        bytes_ *= 2
    if rank == 0:
        print(f"(torch.distributed.all_reduce, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
              f"{gpus(n)}; 256 MiB: {t256 * 1e3:.3f} ms)")

    points = []
    for k in range(1, n + 1):
        group = dist.new_group(ranks=list(range(k)))  # every rank takes part in creating it
        if rank < k:
            torch.manual_seed(0)
            model = make_mlp().to(dev)
            ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank], process_group=group)
            opt = torch.optim.SGD(ddp.parameters(), lr=LR)
            g = torch.Generator(device=dev).manual_seed(1000 + rank)  # this rank's shard
            x = torch.randn(PER_GPU, WIDTH, device=dev, generator=g)
            y = torch.randn(PER_GPU, WIDTH, device=dev, generator=g)

            def step():
                opt.zero_grad(set_to_none=True)
                loss = F.mse_loss(ddp(x), y)
                loss.backward()  # buckets all-reduce while backward runs
                opt.step()
                torch.cuda.synchronize()

            points.append((k, median_s(step, iters)))
            del ddp, model, opt
        dist.barrier()  # ranks >= k waited here
    if rank == 0:
        rows += scaling_rows("mlp step DDP", "torch", points)
        print(f"memory, rank 0 after DDP: peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
        with open(out_path, "w") as f:
            json.dump(rows, f)
    dist.barrier()
    dist.destroy_process_group()


def data_parallel(n, iters):
    """torch.nn.DataParallel, one process: replicas re-made every forward, outputs and
    the loss on GPU 0 (PyTorch's design), the optimizer on GPU 0's master copy."""
    torch.backends.cuda.matmul.allow_tf32 = False
    points = []
    for k in range(1, n + 1):
        torch.manual_seed(0)
        model = make_mlp().to("cuda:0")
        dp = nn.DataParallel(model, device_ids=list(range(k)))
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        x = torch.randn(PER_GPU * k, WIDTH, device="cuda:0")
        y = torch.randn(PER_GPU * k, WIDTH, device="cuda:0")

        def step():
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(dp(x), y)
            loss.backward()
            opt.step()
            for i in range(k):
                torch.cuda.synchronize(i)

        points.append((k, median_s(step, iters)))
        del dp, model, opt, x, y
    peaks = [torch.cuda.max_memory_allocated(i) / 2**30 for i in range(n)]
    print("memory after DataParallel, peak allocated per GPU (GiB): " +
          " ".join(f"cuda:{i} {p:.2f}" for i, p in enumerate(peaks)))
    return scaling_rows("mlp step DP", "torch", points)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    argv = sys.argv[1:]
    json_path = argv[argv.index("--json") + 1] if "--json" in argv[:-1] else None
    iters = 5 if "--quick" in argv else 20
    if not torch.cuda.is_available():
        print("peer_parallel: no CUDA device, nothing to measure (exit 0)")
        return 0
    n = torch.cuda.device_count()
    print(f"peer_parallel: torch {torch.__version__}, {gpus(n)} x {torch.cuda.get_device_name(0)}, "
          f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE', '(unset)')}", flush=True)
    rows, status = [], 0
    if dist.is_available() and dist.is_nccl_available():
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(free_port())
        fd, out_path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            mp.spawn(worker, args=(n, iters, out_path), nprocs=n, join=True)
            with open(out_path) as f:
                rows += json.load(f)
        except Exception as e:  # a failed rank: say so, still run the rest
            print(f"peer_parallel: the DDP run failed: {e}")
            status = 1
        finally:
            os.remove(out_path)
    else:
        print("peer_parallel: torch.distributed with NCCL is not available; DDP rows skipped")
    header()
    rows += data_parallel(n, iters)
    if json_path:
        with open(json_path, "w") as f:
            f.write(f'{{"benchmark": "{TITLE}", "rows": [\n')
            f.write(",\n".join("  " + json.dumps(r) for r in rows))
            f.write("\n]}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
