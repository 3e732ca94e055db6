#!/usr/bin/env python3
"""One training step's kernels by device time, from an ncu CSV of a run that repeats
the same step (bench_gpt --profile: 3 warm-up steps, then --steps more):

    ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none \
        --csv --page details build-gpu/benchmarks/bench_gpt --profile --only char \
        --steps 1 > k.csv
    python3 tools/kernel_times.py k.csv [--top 40]

The step is found as the shortest tail of the launch sequence that repeats the launches
just before it (kernel names in order); its kernels are summed by name and printed
largest first with calls, microseconds and share of the step. ncu runs kernels one at a
time, so the sum is device time without overlap or launch gaps.
"""
import csv
import sys

UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
           "second": 1e9, "s": 1e9}


def launches(path):
    """[(name, nanoseconds)] in launch order, from ncu's --csv --page details output."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Name" in r), None)
    if head is None:
        raise SystemExit(f"kernel_times: no ncu table in {path}")
    h = rows[head]
    col = {c: h.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
    out = {}
    for r in rows[head + 1:]:
        if len(r) < len(h) or r[col["Metric Name"]] != "gpu__time_duration.sum":
            continue
        unit = r[col["Metric Unit"]]
        if unit not in UNIT_NS:
            raise SystemExit(f"kernel_times: unknown duration unit {unit!r}")
        value = float(r[col["Metric Value"]].replace(",", ""))
        out[int(r[col["ID"]])] = (r[col["Kernel Name"]], value * UNIT_NS[unit])
    return [out[i] for i in sorted(out)]


def step_period(names, shortest=4):
    """The shortest P >= shortest with names[-P:] == names[-2P:-P]; None if none."""
    for p in range(shortest, len(names) // 2 + 1):
        if names[-p:] == names[-2 * p:-p]:
            return p
    return None


def short(name):
    """A kernel's name without "void", anonymous namespaces and its argument list."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    depth = 0
    for i, ch in enumerate(name):
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0:
            name = name[:i]
            break
    return name if len(name) <= 110 else name[:107] + "..."


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 40
    seq = launches(argv[1])
    p = step_period([n for n, _ in seq])
    if p is None:
        print(f"kernel_times: no repeating step in {len(seq)} launches")
        return 1
    step = seq[-p:]
    total = sum(t for _, t in step)
    by = {}
    for n, t in step:
        e = by.setdefault(short(n), [0, 0.0])
        e[0] += 1
        e[1] += t
    print(f"one step: {p} launches, {total / 1e3:.1f} us of kernel time "
          f"({len(seq)} launches recorded)")
    print(f"{'us':>9} {'calls':>5} {'share':>6}  kernel")
    for n, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{t / 1e3:9.1f} {c:5d} {100 * t / total:5.1f}%  {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
