#!/usr/bin/env python3
"""Joins the JSON of the benchmark binaries with their PyTorch peers' (one run on
one GPU) into markdown tables with the ratios the issues target. Sections whose
files are missing are left out.

    python3 benchmarks/results_table.py DIR
DIR holds linear.json mse.json adam.json peer.json (bench_linear/mse/adam,
peer_pytorch.py), train_step.json peer_train_step.json (bench_train_step,
peer_train_step.py), digits_mlp.json (bench_digits_mlp, joined with
peer_train_step.json's digits rows) and op_overhead.json (bench_op_overhead).
"""
import json
import os
import sys


def load(d, name):
    p = os.path.join(d, name)
    return json.load(open(p))["rows"] if os.path.exists(p) else []


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    lin, mse, adam, peer = (load(d, f) for f in ("linear.json", "mse.json", "adam.json", "peer.json"))
    pk = {(r["workload"], r["dtype"], r["shape"]): r for r in peer}
    print("### Linear (ms; ratio = ours / PyTorch time, lower is better)\n")
    print("| workload | dtype | shape | impl | ms | TFLOP/s | PyTorch ms | time vs PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    for r in lin:
        if r["workload"] not in ("fwd", "fwd+bwd op", "fwd tile"):
            continue
        p = pk.get(("fwd" if r["workload"] == "fwd tile" else r["workload"], r["dtype"], r["shape"]))
        pm = f"{p['ms']:.4f}" if p else "-"
        ratio = f"{r['ms'] / p['ms']:.2f}x" if p else "-"
        print(f"| {r['workload']} | {r['dtype']} | {r['shape']} | {r['impl']} | {r['ms']:.4f} | "
              f"{r['rate']:.1f} | {pm} | {ratio} |")
    print("\n### MSE forward + backward, 2^28 elements\n")
    print("| workload | dtype | impl | ms | GB/s (3 accesses) | note | PyTorch ms | time vs PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    for r in mse:
        p = pk.get(("mse_loss fwd+bwd op", r["dtype"], r["shape"])) if "mse" in r["workload"] else None
        pm = f"{p['ms']:.4f}" if p else "-"
        ratio = f"{r['ms'] / p['ms']:.2f}x" if p else "-"
        print(f"| {r['workload']} | {r['dtype']} | {r['impl']} | {r['ms']:.4f} | {r['rate']:.0f} | "
              f"{r['note']} | {pm} | {ratio} |")
    print("\n### Adam step (fp32)\n")
    print("| params | impl | ms | GB/s (28 B/param) | note | PyTorch fused ms | time vs PyTorch fused |")
    print("|---|---|---|---|---|---|---|")
    for r in adam:
        p = next((q for q in peer if q["workload"] == r["workload"] and q["impl"] == "fused"), None)
        pm = f"{p['ms']:.4f}" if p else "-"
        ratio = f"{r['ms'] / p['ms']:.2f}x" if p else "-"
        print(f"| {r['workload']} | {r['impl']} | {r['ms']:.4f} | {r['rate']:.0f} | {r['note']} | "
              f"{pm} | {ratio} |")

    train, ptrain = load(d, "train_step.json"), load(d, "peer_train_step.json")
    train = train + load(d, "digits_mlp.json")
    if train:
        pt = {(r["workload"], r["dtype"], r["shape"], r["impl"]): r for r in ptrain}
        print("\n### Training steps (wall time per step; ratio = ours / PyTorch, lower is better)\n")
        print("| workload | dtype | shape | impl | ms | note | PyTorch ms | time vs PyTorch |")
        print("|---|---|---|---|---|---|---|---|")
        for r in train:
            p = pt.get((r["workload"], r["dtype"], r["shape"], r["impl"]))
            pm = f"{p['ms']:.4f}" if p else "-"
            ratio = f"{r['ms'] / p['ms']:.3f}x" if p else "-"
            print(f"| {r['workload']} | {r['dtype']} | {r['shape']} | {r['impl']} | {r['ms']:.4f} | "
                  f"{r['note']} | {pm} | {ratio} |")
        extra = [r for r in ptrain if (r["workload"], r["dtype"], r["shape"], r["impl"]) not in
                 {(q["workload"], q["dtype"], q["shape"], q["impl"]) for q in train}]
        for r in extra:
            print(f"| {r['workload']} | {r['dtype']} | {r['shape']} | PyTorch {r['impl']} | - | "
                  f"{r['note']} | {r['ms']:.4f} | - |")
    ovh = load(d, "op_overhead.json")
    if ovh:
        print("\n### Eager per-op host overhead (ns per op)\n")
        print("| workload | device | shape | host ns/op | ratio to a bare launch |")
        print("|---|---|---|---|---|")
        for r in ovh:
            ratio = f"{r['ratio_to_bare_launch']:.2f}x" if r["ratio_to_bare_launch"] > 0 else "-"
            print(f"| {r['workload']} | {r['device']} | {r['shape']} | "
                  f"{r['host_ns_per_op']:.0f} | {ratio} |")


if __name__ == "__main__":
    main()
