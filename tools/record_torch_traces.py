#!/usr/bin/env python3
"""Records PyTorch training loops' allocator traces for ember-replay (needs torch
and a CUDA GPU).

Each workload runs in a fresh Python process, so that nothing is live or cached
when recording begins (torch.cuda.memory._record_memory_history is turned on
before the first CUDA allocation, the peak statistics are reset, and the whole
run, warm-up included, is recorded). Afterwards the process takes
torch.cuda.memory._snapshot(), converts its device trace with
tools/convert_torch_trace.py and writes <out>/<workload>.csv whose metadata
lines say how it was made and carry PyTorch's own peaks
(torch.cuda.max_memory_reserved/allocated), so a replay can be compared:
ember's native policy should reproduce torch_max_memory_reserved within 1%.

Workloads (fixed seeds):
  mlp_adam            MLP 2 x [Linear 1024->4096, ReLU, Linear 4096->1024], Adam,
                      batch 512, MSE, 60 steps
  varying_batch       3 x [Linear 1024->4096, GELU, Linear 4096->1024], AdamW, batch
                      drawn from 64..4096 every step, MSE, 200 steps (the peer loop of
                      the reference whose peak reserved / allocated is about 1.3)
  varying_batch_expandable
                      the same under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
                      (PyTorch's own expandable peaks, for comparison; its
                      segment_map rows have no CSV row and are counted as dropped)
  transformer         4-layer nn.TransformerEncoder (d_model 512, 8 heads, batch
                      first), batch 16, sequence length drawn from 64..512, AdamW,
                      bf16 autocast, 100 steps
  conv                a small CNN (3 conv + BN + ReLU blocks, pooling, Linear) on
                      64 x 3 x 64 x 64 random images, SGD with momentum, 60 steps

  tools/record_torch_traces.py --out DIR [--only NAME[,NAME...]] [--steps-scale F]

Writes DIR/<name>.csv for each workload and DIR/MANIFEST.md (one line per trace:
events, PyTorch's peaks, the command), and prints the same.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

WORKLOADS = {
    "mlp_adam": {},
    "varying_batch": {},
    "varying_batch_expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    "transformer": {},
    "conv": {},
}


def run_workload(name, steps_scale):
    """Runs in the child process: the workload, recorded. Returns facts as a dict."""
    import torch  # noqa: PLC0415 (only the child needs torch)

    torch.manual_seed(0)
    torch.cuda.init()
    # Record everything, without Python stacks (cheaper; the CSV keeps no stacks).
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=50_000_000)
    torch.cuda.reset_peak_memory_stats()
    dev = torch.device("cuda")
    steps = 0

    def scaled(n):
        return max(2, int(n * steps_scale))

    if name == "mlp_adam":
        layers = []
        for _ in range(2):
            layers += [torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)]
        model = torch.nn.Sequential(*layers).to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        steps = scaled(60)
        for _ in range(steps):
            x = torch.randn(512, 1024, device=dev)
            y = torch.randn(512, 1024, device=dev)
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    elif name.startswith("varying_batch"):
        layers = []
        for _ in range(3):
            layers += [torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)]
        model = torch.nn.Sequential(*layers).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        gen = torch.Generator().manual_seed(1)
        steps = scaled(200)
        for _ in range(steps):
            b = int(torch.randint(64, 4097, (1,), generator=gen))
            x = torch.randn(b, 1024, device=dev)
            y = torch.randn(b, 1024, device=dev)
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    elif name == "transformer":
        layer = torch.nn.TransformerEncoderLayer(512, 8, dim_feedforward=2048, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, 4).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        gen = torch.Generator().manual_seed(2)
        steps = scaled(100)
        for _ in range(steps):
            t = int(torch.randint(64, 513, (1,), generator=gen))
            x = torch.randn(16, t, 512, device=dev)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = model(x)
            out.float().pow(2).mean().backward()
            opt.step()
    elif name == "conv":
        def block(cin, cout):
            return [torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.BatchNorm2d(cout),
                    torch.nn.ReLU(), torch.nn.MaxPool2d(2)]
        model = torch.nn.Sequential(*block(3, 64), *block(64, 128), *block(128, 256),
                                    torch.nn.Flatten(), torch.nn.Linear(256 * 8 * 8, 10)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        steps = scaled(60)
        for _ in range(steps):
            x = torch.randn(64, 3, 64, 64, device=dev)
            y = torch.randint(0, 10, (64,), device=dev)
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    else:
        raise SystemExit(f"unknown workload {name}")

    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    entries = sum(len(t) for t in snapshot["device_traces"])
    return snapshot, {
        "steps": steps,
        "torch_version": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "torch_max_memory_reserved": torch.cuda.max_memory_reserved(),
        "torch_max_memory_allocated": torch.cuda.max_memory_allocated(),
        "history_entries": entries,
        "history_complete": entries < 50_000_000,
    }


def child(name, out_dir, steps_scale):
    import convert_torch_trace as ct  # noqa: PLC0415

    snapshot, facts = run_workload(name, steps_scale)
    rows, meta = ct.convert(snapshot, device=None)
    meta = [("workload", name), ("made_by", "tools/record_torch_traces.py --only " + name),
            ("date", datetime.date.today().isoformat()),
            ("alloc_conf", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")),
            ] + [(k, str(v)) for k, v in facts.items()] + meta
    path = os.path.join(out_dir, name + ".csv")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        ct.write_csv(rows, meta, f)
    facts["rows"] = len(rows)
    facts["path"] = path
    print(json.dumps(facts))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the CSV traces")
    p.add_argument("--only", help="comma-separated workloads (default: all)")
    p.add_argument("--steps-scale", type=float, default=1.0, help="multiply every step count")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.child:
        child(args.child, args.out, args.steps_scale)
        return 0
    names = args.only.split(",") if args.only else list(WORKLOADS)
    for n in names:
        if n not in WORKLOADS:
            p.error(f"unknown workload {n} (known: {', '.join(WORKLOADS)})")
    lines = ["| trace | steps | rows | torch max reserved | torch max allocated | reserved/allocated | alloc conf |",
             "|---|---:|---:|---:|---:|---:|---|"]
    failed = False
    for n in names:
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.update(WORKLOADS[n])
        cmd = [sys.executable, os.path.abspath(__file__), "--out", args.out, "--child", n,
               "--steps-scale", str(args.steps_scale)]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            print(f"record_torch_traces: {n} failed:\n{res.stderr}", file=sys.stderr)
            failed = True
            continue
        facts = json.loads(res.stdout.strip().splitlines()[-1])
        if not facts["history_complete"]:
            print(f"record_torch_traces: {n}: the history ring filled up; the trace is partial",
                  file=sys.stderr)
        mib = 1024 * 1024
        r, a = facts["torch_max_memory_reserved"], facts["torch_max_memory_allocated"]
        lines.append(f"| {n}.csv | {facts['steps']} | {facts['rows']} | {r / mib:.2f} MiB | "
                     f"{a / mib:.2f} MiB | {r / a:.3f} | {WORKLOADS[n].get('PYTORCH_CUDA_ALLOC_CONF', '')} |")
        print(lines[-1], flush=True)
    with open(os.path.join(args.out, "MANIFEST.md"), "w", encoding="utf-8") as f:
        f.write("# Allocator traces recorded from PyTorch\n\n")
        f.write(f"Made by `tools/record_torch_traces.py --out {args.out}` (each workload in a fresh "
                "process, recording from before the first CUDA allocation; see the script's "
                "docstring for the workloads and each CSV's metadata lines for the versions and GPU).\n\n")
        f.write("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
