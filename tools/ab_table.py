#!/usr/bin/env python3
"""Per-repetition ratios of two variants of one benchmark binary, run alternating.

Reads DIR/VARIANT.REP.json (bench::Table's --json files: {"rows": [{"workload",
"shape", "dtype", "ms", ...}]}) and prints, for each row (workload, shape, dtype) both
variants have, the medians of each and the median and range of OTHER / BASE over the
repetitions both ran.
Usage: tools/ab_table.py DIR BASE OTHER
"""
import glob
import json
import os
import statistics
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: ab_table.py DIR BASE OTHER")
    d, base, other = sys.argv[1:]
    runs = {}
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        variant, rep = os.path.basename(f).rsplit(".", 2)[:2]
        with open(f) as fh:
            rows = json.load(fh)["rows"]
        for row in rows:
            key = (row["workload"], row.get("shape", ""), row["dtype"])
            runs.setdefault(key, {}).setdefault(variant, {})[rep] = row["ms"]
    printed = 0
    for (workload, shape, dtype), by in runs.items():
        reps = sorted(set(by.get(base, {})) & set(by.get(other, {})))
        if not reps:
            continue
        ratio = [by[other][r] / by[base][r] for r in reps]
        b = statistics.median(by[base][r] for r in reps)
        o = statistics.median(by[other][r] for r in reps)
        print(f"{workload:24s} {shape:22s} {dtype:5s} {base} {b:.4f} ms  {other} {o:.4f} ms  "
              f"{other}/{base} {statistics.median(ratio):.3f} "
              f"[{min(ratio):.3f}-{max(ratio):.3f}] ({len(reps)} reps)")
        printed += 1
    if printed == 0:
        sys.exit(f"ab_table: no row with both {base} and {other} in {d}")


if __name__ == "__main__":
    main()
