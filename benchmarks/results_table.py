#!/usr/bin/env python3
"""Joins the JSON of bench_linear / bench_mse / bench_adam with peer_pytorch's
(one run on one GPU) into markdown tables with the ratios the issue targets.

    python3 benchmarks/results_table.py DIR   # DIR holds linear.json mse.json adam.json peer.json
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


if __name__ == "__main__":
    main()
