#!/usr/bin/env python3
"""The PyTorch peer of bench_parallel, on the same machine in the same run.
Sections (--sections, comma-separated; default all), as bench_parallel's:

  ar         torch.distributed all_reduce (NCCL, one process per GPU, float32
             sum), 256 KiB .. 256 MiB: median time, algbw and busbw = algbw *
             2(n-1)/n;
  breakdown  one all_reduce at 256 KiB, 1 MiB and 8 MiB: host time until the call
             returns, then torch.cuda.synchronize, CUDA-event device time, and 20
             calls queued back to back;
  ddp        the MLP step (4 x Linear(4096, 4096), ReLU between, MSE mean loss,
             plain SGD lr 1e-3, fp32 without TF32, 256 samples per GPU) under
             DistributedDataParallel on k = 1..N GPUs (a process group over ranks
             0..k-1; default buckets: 25 MiB, first 1 MiB, as ember's), and on N
             with the bf16_compress_hook (gradients all-reduced in bfloat16);
  zero       the same step with Adam under DDP, and with
             torch.distributed.optim.ZeroRedundancyOptimizer(Adam), N GPUs:
             step time, optimizer state and peak allocated per rank;
  dp         torch.nn.DataParallel in one process (k = 1..N), and its peak
             allocated memory per GPU (largest / smallest).

Times are wall clock around the call plus torch.cuda.synchronize(), the median
of --iters (20) after 3 warm-ups, as bench_parallel does. Rows print in the
benchmarks' table format; --json FILE writes them as the other benches do; --tag
T appends T to every impl name (gpu_parallel.sh: "socket" under
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1).

    python3 benchmarks/peer_parallel.py [--json FILE] [--quick] [--iters N]
                                        [--sections LIST] [--tag T]

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

PER_GPU, WIDTH, LAYERS, LR = 256, 4096, 4, 1e-3
TITLE = "peer_parallel: PyTorch"


def gpus(k):
    return f"{k} GPU" if k == 1 else f"{k} GPUs"


def size_str(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def make_mlp():
    layers = []
    for i in range(LAYERS):
        if i > 0:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(WIDTH, WIDTH))
    return nn.Sequential(*layers)


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


class Rows:
    def __init__(self, tag):
        self.tag, self.rows = tag, []

    def add(self, workload, shape, impl, s, rate, unit, note):
        impl = f"{impl} {self.tag}" if self.tag else impl
        r = dict(workload=workload, dtype="f32", shape=shape, impl=impl, ms=s * 1e3, rate=rate,
                 unit=unit, note=note)
        print(f"{workload:<22} {'f32':<6} {shape:<22} {impl:<10} {r['ms']:10.4f} {rate:8.1f} "
              f"{unit:<4} {note}", flush=True)
        self.rows.append(r)


def scaling_rows(rows, workload, impl, points):
    """points: [(k, seconds)]; rows with samples/s and efficiency."""
    one = PER_GPU / points[0][1]
    for k, s in points:
        rate = PER_GPU * k / s
        rows.add(workload, f"{gpus(k)} x 256", impl, s, rate, "samp/s",
                 f"efficiency {rate / (k * one):.3f}")


def nccl_env():
    env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("NCCL_"))
    return env or "(none)"


def sizes():
    b = 256 << 10
    while b <= 256 << 20:
        yield b
        b *= 2


def bench_all_reduce(rank, n, iters, rows):
    dev = torch.device("cuda", rank)
    for b in sizes():
        count = b // 4
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
        algbw = b / s / 1e9
        if rank == 0:
            rows.add("all_reduce", f"{size_str(b)} x {gpus(n)}", "torch", s, algbw * 2 * (n - 1) / n,
                     "GB/s", f"algbw {algbw:.1f} GB/s")


def bench_breakdown(rank, n, iters, rows):
    dev = torch.device("cuda", rank)
    iters = max(iters, 50)
    if rank == 0:
        print(f"\nNCCL {'.'.join(map(str, torch.cuda.nccl.version()))} (torch's); NCCL_* in the "
              f"environment: {nccl_env()}")
        print(f"breakdown of one torch.distributed.all_reduce, median over {iters} calls, "
              f"microseconds:\n{'size':<10} {'call':>8} {'sync':>8} {'total':>8} {'device':>8}")
    for b in (256 << 10, 1 << 20, 8 << 20):
        t = torch.zeros(b // 4, device=dev)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        call, sync, total, device = [], [], [], []
        for it in range(iters + 5):
            t0 = time.perf_counter_ns()
            e0.record()
            dist.all_reduce(t)
            t1 = time.perf_counter_ns()
            e1.record()
            torch.cuda.synchronize()
            t2 = time.perf_counter_ns()
            if it < 5:
                continue
            call.append((t1 - t0) / 1e3)
            sync.append((t2 - t1) / 1e3)
            total.append((t2 - t0) / 1e3)
            device.append(e0.elapsed_time(e1) * 1e3)
        per = []
        for rep in range(7):
            t0 = time.perf_counter_ns()
            for _ in range(20):
                dist.all_reduce(t)
            torch.cuda.synchronize()
            if rep >= 2:
                per.append((time.perf_counter_ns() - t0) / 20e3)
        if rank == 0:
            med = statistics.median
            print(f"{size_str(b):<10} {med(call):8.1f} {med(sync):8.1f} {med(total):8.1f} "
                  f"{med(device):8.1f}   back to back: {med(per):.1f} us/call")
            rows.add("ar breakdown", f"{size_str(b)} torch", "torch", med(total) / 1e6,
                     med(device), "us dev", "host total ms; rate: device us")
            rows.add("ar back-to-back", f"{size_str(b)} torch", "torch", med(per) / 1e6, 0, "",
                     "ms per call, 20 queued")


def bench_ddp(rank, n, iters, rows):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    dev = torch.device("cuda", rank)
    points, bf16 = [], None
    for k in range(1, n + 1):
        for compress in (False, True):
            if compress and k != n:
                continue
            group = dist.new_group(ranks=list(range(k)))  # every rank takes part in creating it
            if rank < k:
                torch.manual_seed(0)
                model = make_mlp().to(dev)
                ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank],
                                                          process_group=group)
                if compress:
                    ddp.register_comm_hook(group, default_hooks.bf16_compress_hook)
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

                s = median_s(step, iters)
                if compress:
                    bf16 = (k, s)
                else:
                    points.append((k, s))
                del ddp, model, opt
            dist.barrier()  # ranks >= k waited here
    if rank == 0:
        scaling_rows(rows, "mlp step DDP", "torch", points)
        if bf16 and n > 1:
            k, s = bf16
            one = PER_GPU / points[0][1]
            rows.add("mlp step DDP", f"{gpus(k)} x 256", "torch bf16", s, PER_GPU * k / s, "samp/s",
                     f"efficiency {PER_GPU * k / s / (k * one):.3f}")


def bench_zero(rank, n, iters, rows):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    dev = torch.device("cuda", rank)
    for zero in (False, True):
        torch.cuda.reset_peak_memory_stats(dev)
        torch.manual_seed(0)
        model = make_mlp().to(dev)
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
        if zero:
            opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=LR)
        else:
            opt = torch.optim.Adam(ddp.parameters(), lr=LR)
        g = torch.Generator(device=dev).manual_seed(2000 + rank)
        x = torch.randn(PER_GPU, WIDTH, device=dev, generator=g)
        y = torch.randn(PER_GPU, WIDTH, device=dev, generator=g)

        def step():
            opt.zero_grad(set_to_none=True)
            F.mse_loss(ddp(x), y).backward()
            opt.step()
            torch.cuda.synchronize()

        s = median_s(step, iters)
        inner = opt.optim if zero else opt
        state = sum(v.numel() * v.element_size() for st in inner.state.values()
                    for v in st.values() if torch.is_tensor(v) and v.dim() > 0)
        if rank == 0:
            what = "ZeRO Adam" if zero else "DDP Adam"
            peak = torch.cuda.max_memory_allocated(dev) / 2**30
            print(f"memory, rank 0 after {what}: optimizer state {state / 2**20:.1f} MiB, "
                  f"peak allocated {peak:.2f} GiB")
            rows.add(f"mlp step {what}", f"{gpus(n)} x 256", "torch", s, PER_GPU * n / s, "samp/s",
                     f"state {state / 2**20:.1f} MiB/rank, peak alloc {peak:.2f} GiB")
        del ddp, model, opt
        dist.barrier()


def worker(rank, n, iters, sections, tag, out_path):
    """One process per GPU."""
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=n,
                                device_id=dev)
    except TypeError:  # torch before 2.3: no device_id
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=n)
    rows = Rows(tag)
    if rank == 0:
        header()
    if "ar" in sections:
        bench_all_reduce(rank, n, iters, rows)
    if "breakdown" in sections:
        bench_breakdown(rank, n, iters, rows)
    if "ddp" in sections:
        bench_ddp(rank, n, iters, rows)
    if "zero" in sections:
        bench_zero(rank, n, iters, rows)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(rows.rows, f)
    dist.barrier()
    dist.destroy_process_group()


def data_parallel(n, iters, rows):
    """torch.nn.DataParallel, one process: replicas re-made every forward, outputs and
    the loss on GPU 0 (PyTorch's design), the optimizer on GPU 0's master copy."""
    torch.backends.cuda.matmul.allow_tf32 = False
    points = []
    for k in range(1, n + 1):
        for i in range(n):
            torch.cuda.reset_peak_memory_stats(i)
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
        if k == n:
            peaks = [torch.cuda.max_memory_allocated(i) for i in range(k)]
            print("memory after DataParallel, peak allocated per GPU (GiB): " +
                  " ".join(f"cuda:{i} {p / 2**30:.2f}" for i, p in enumerate(peaks)))
            rows.add("dp peak max/min", f"{gpus(k)} x 256", "torch", 0.0, max(peaks) / min(peaks),
                     "x", f"peak allocated {max(peaks) / 2**30:.2f} / {min(peaks) / 2**30:.2f} GiB")
        del dp, model, opt, x, y
    scaling_rows(rows, "mlp step DP", "torch", points)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    argv = sys.argv[1:]

    def arg(name, default):
        return argv[argv.index(name) + 1] if name in argv[:-1] else default

    json_path = arg("--json", None)
    iters = int(arg("--iters", 5 if "--quick" in argv else 20))
    sections = set(arg("--sections", "ar,breakdown,ddp,zero,dp").split(","))
    tag = arg("--tag", "")
    if not torch.cuda.is_available():
        print("peer_parallel: no CUDA device, nothing to measure (exit 0)")
        return 0
    n = torch.cuda.device_count()
    print(f"peer_parallel: torch {torch.__version__}, {gpus(n)} x {torch.cuda.get_device_name(0)}, "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, NCCL_* set: {nccl_env()}",
          flush=True)
    rows, status = [], 0
    per_rank = sections & {"ar", "breakdown", "ddp", "zero"}
    if per_rank:
        if dist.is_available() and dist.is_nccl_available():
            os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
            os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ["MASTER_PORT"] = str(free_port())
            fd, out_path = tempfile.mkstemp(suffix=".json")
            os.close(fd)
            try:
                mp.spawn(worker, args=(n, iters, per_rank, tag, out_path), nprocs=n, join=True)
                with open(out_path) as f:
                    rows += json.load(f)
            except Exception as e:  # a failed rank: say so, still run the rest
                print(f"peer_parallel: the one-process-per-GPU run failed: {e}")
                status = 1
            finally:
                os.remove(out_path)
        else:
            print("peer_parallel: torch.distributed with NCCL is not available; skipped "
                  f"{','.join(sorted(per_rank))}")
    if "dp" in sections:
        header()
        dp_rows = Rows(tag)
        data_parallel(n, iters, dp_rows)
        rows += dp_rows.rows
    if json_path:
        with open(json_path, "w") as f:
            f.write(f'{{"benchmark": "{TITLE}", "rows": [\n')
            f.write(",\n".join("  " + json.dumps(r) for r in rows))
            f.write("\n]}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
