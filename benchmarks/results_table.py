#!/usr/bin/env python3
"""Joins the JSON of ember's benchmark binaries with their peers' (PyTorch in
Python, libtorch in C++) into markdown tables: the median, the spread (min-max)
and the ratio each row is judged by, and a verdict on each target.

    python3 benchmarks/results_table.py DIR

DIR is what benchmarks/compare.sh writes: rep-1/, rep-2/, ... one folder per
repetition (ours and the peers run as separate processes, alternating), each with
the JSON files below. A plain folder of those files counts as one repetition.

How a figure is read:
  - a time is the median over repetitions of each process's own median; its range
    is the min-max over repetitions (with one repetition: the range of the rounds
    inside that process, marked "1 run");
  - a ratio is ours / the peer's time, taken per repetition (the two processes ran
    next to each other), then its median and min-max over repetitions;
  - a target "ratio <= T" is met only when the whole range is at or below T, and
    missed only when the whole range is above it; a range that straddles T is
    "undecided" (the difference is inside the noise), never met or missed.
Sections whose files are missing are left out.

Files: linear.json mse.json adam.json cross_entropy.json layer_norm.json peer.json
(bench_linear/mse/adam/cross_entropy/layer_norm and peer_pytorch.py); train_step_seed.json train_step_mlp.json (or train_step.json),
peer_train_step_seed.json peer_train_step_mlp.json (or peer_train_step.json);
op_overhead.json, linear_small.json (bench_op_overhead, bench_linear_small);
libtorch_{train_step,op_overhead,linear_small}.json (peer_libtorch);
py_op_overhead.json py_linear_small.json (peer_host_bound.py); digits_mlp.json
(bench_digits_mlp) with peer_train_step_digits.json (or peer_train_step.json);
gpt.json (bench_gpt) with peer_gpt.json (peer_gpt.py).
"""
import glob
import json
import os
import re
import statistics
import sys


MIN_REPS = 5  # the house rule: a ratio counts from at least five alternating repetitions


def reps_of(d):
    reps = sorted(glob.glob(os.path.join(d, "rep-*")), key=lambda p: int(p.rsplit("-", 1)[1]))
    return reps if reps else [d]


def held(reps, *names):
    """How many of the repetitions hold any of the files `names` (a run cut by its time
    limit leaves its last repetition short of the later sections' files)."""
    return sum(1 for rep in reps if any(os.path.exists(os.path.join(rep, n)) for n in names))


def reps_text(reps, *names):
    """"N repetition(s)" for a section, "N of M" when a cut run left some without it."""
    n = held(reps, *names)
    return f"{n} repetition(s)" if n == len(reps) else f"{n} of {len(reps)} repetition(s)"


def load(rep, *names):
    rows = []
    for name in names:
        p = os.path.join(rep, name)
        if os.path.exists(p):
            with open(p) as f:
                rows += json.load(f)["rows"]
    return rows


class Series:
    """One figure over repetitions: each repetition's value, and (one repetition) the
    process's own min and max."""

    def __init__(self):
        self.values, self.lo, self.hi = [], [], []

    def add(self, value, lo=None, hi=None):
        self.values.append(value)
        self.lo.append(value if lo is None else lo)
        self.hi.append(value if hi is None else hi)

    def __bool__(self):
        return bool(self.values)

    def median(self):
        return statistics.median(self.values)

    def range(self):
        if len(self.values) == 1:
            return self.lo[0], self.hi[0]
        return min(self.values), max(self.values)

    def fmt(self, digits=4):
        if not self:
            return "-"
        lo, hi = self.range()
        one = " (1 run)" if len(self.values) == 1 else ""
        return f"{self.median():.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]{one}"


def collect(reps, names, key, value="ms"):
    """{key(row): Series} over repetitions."""
    out = {}
    for rep in reps:
        for r in load(rep, *names):
            s = out.setdefault(key(r), Series())
            s.add(r[value], r.get(value + "_min"), r.get(value + "_max"))
    return out


def ratio_series(reps, ours_names, ours_key, peer_names, peer_key, want, value="ms"):
    """Per repetition: ours / peer for the row `want` (a key of both), as a Series."""
    s = Series()
    for rep in reps:
        o = {ours_key(r): r for r in load(rep, *ours_names)}
        p = {peer_key(r): r for r in load(rep, *peer_names)}
        if want in o and want in p and p[want][value] > 0:
            s.add(o[want][value] / p[want][value])
    return s


def verdict(ratio, target):
    """met / missed / undecided for `ratio <= target` from the ratio's range."""
    if not ratio:
        return "not measured"
    lo, hi = ratio.range()
    if len(ratio.values) == 1:
        return "one run: not judged"
    short = "" if len(ratio.values) >= MIN_REPS else \
        f" (provisional: {len(ratio.values)} repetitions, short of {MIN_REPS})"
    if hi <= target:
        return "met" + short
    if lo > target:
        return "missed" + short
    return "undecided (range straddles the target)"


def rfmt(ratio):
    if not ratio:
        return "-"
    lo, hi = ratio.range()
    return f"{ratio.median():.3f}x [{lo:.3f}-{hi:.3f}]"


TARGETS = []  # (issue, what, ratio Series, target)


def table(header, rows):
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    print()


def row_key(r):
    return (r["workload"], r["dtype"], r["shape"], r["impl"])


def host_bound(reps):
    train_names = ("train_step_seed.json", "train_step.json")
    lt_train = ("libtorch_train_step.json",)
    py_train = ("peer_train_step_seed.json", "peer_train_step.json")
    ours = collect(reps, train_names, row_key)
    lt = collect(reps, lt_train, row_key)
    py = collect(reps, py_train, row_key)
    rows = []
    for impl in ("eager", "eager+empty_cache", "graphed"):
        k = ("seed step", "f32", "32x10->10", impl)
        if k not in ours:
            continue
        r_lt = ratio_series(reps, train_names, row_key, lt_train, row_key, k)
        r_py = ratio_series(reps, train_names, row_key, py_train, row_key, k)
        rows.append([f"seed step, {impl}", ours[k].fmt(), lt.get(k, Series()).fmt(),
                     py.get(k, Series()).fmt(), rfmt(r_lt), rfmt(r_py)])
        TARGETS.append(("20", f"seed step {impl} <= 1.0x libtorch", r_lt, 1.0))
        if impl == "eager":
            TARGETS.append(("8", "seed step eager <= 0.10x PyTorch eager (fused Adam)", r_py, 0.10))
        if impl == "graphed":
            TARGETS.append(("8", "seed step graphed <= 1.0x PyTorch graphed", r_py, 1.0))
    op_key = lambda r: (r["workload"].strip(), r["device"], r["shape"])  # noqa: E731
    ops = collect(reps, ("op_overhead.json",), op_key, "host_ns_per_op")
    lt_ops = collect(reps, ("libtorch_op_overhead.json",), op_key, "host_ns_per_op")
    py_ops = collect(reps, ("py_op_overhead.json",), op_key, "host_ns_per_op")
    for dev, shape in (("cuda:0", "[16]"), ("cuda:0", "[4096]"), ("cpu", "[16]"), ("cpu", "[4096]")):
        for what in ("add, no grad", "add, inputs require grad"):
            k = (what, dev, shape)
            if k not in ops:
                continue
            r_lt = ratio_series(reps, ("op_overhead.json",), op_key, ("libtorch_op_overhead.json",),
                                op_key, k, "host_ns_per_op")
            r_py = ratio_series(reps, ("op_overhead.json",), op_key, ("py_op_overhead.json",), op_key,
                                k, "host_ns_per_op")
            rows.append([f"{what}, {dev} {shape} (ns)", ops[k].fmt(0), lt_ops.get(k, Series()).fmt(0),
                         py_ops.get(k, Series()).fmt(0), rfmt(r_lt), rfmt(r_py)])
            if (dev, shape) in (("cuda:0", "[16]"), ("cpu", "[4096]")):
                TARGETS.append(("20", f"{what} {dev} {shape} <= 1.0x libtorch", r_lt, 1.0))
    lin_key = lambda r: (r["workload"], r["dtype"], r["shape"])  # noqa: E731
    lin = collect(reps, ("linear_small.json",), lin_key)
    lt_lin = collect(reps, ("libtorch_linear_small.json",), lin_key)
    py_lin = collect(reps, ("py_linear_small.json",), lin_key)
    for k in sorted(lin, key=lambda k: (k[2], k[0])):
        r_lt = ratio_series(reps, ("linear_small.json",), lin_key, ("libtorch_linear_small.json",),
                            lin_key, k)
        r_py = ratio_series(reps, ("linear_small.json",), lin_key, ("py_linear_small.json",), lin_key, k)
        rows.append([f"linear {k[0]} {k[2]}", lin[k].fmt(), lt_lin.get(k, Series()).fmt(),
                     py_lin.get(k, Series()).fmt(), rfmt(r_lt), rfmt(r_py)])
        TARGETS.append(("20", f"linear {k[0]} {k[2]} <= 1.0x libtorch", r_lt, 1.0))
    if rows:  # (a run without the host set prints no heading for it)
        print(f"### Host-bound rows: ember against libtorch (C++) and PyTorch (Python), "
              f"{reps_text(reps, *train_names, 'op_overhead.json', 'linear_small.json')}\n")
        print("Times in ms (add: host ns per op); ratio = ember / peer, per repetition.\n")
        table(["row", "ember", "libtorch", "PyTorch", "ember / libtorch", "ember / PyTorch"], rows)


def mlp(reps):
    names = ("train_step_mlp.json", "train_step.json")
    peer = ("peer_train_step_mlp.json", "peer_train_step.json")
    ours = collect(reps, names, row_key)
    py = collect(reps, peer, row_key)
    rows = []
    for mode in ("f32", "tf32", "bf16"):
        k = ("mlp step", mode, "4x4096, batch 8192", "eager")
        if k not in ours:
            continue
        r = ratio_series(reps, names, row_key, peer, row_key, k)
        rows.append([mode, ours[k].fmt(), py.get(k, Series()).fmt(), rfmt(r), verdict(r, 1.0)])
        TARGETS.append(("8", f"MLP step {mode} <= 1.0x PyTorch", r, 1.0))
        if mode == "bf16":
            TARGETS.append(("28", "MLP step bf16 <= 1.0x PyTorch", r, 1.0))
    if rows:
        print(f"### MLP step: 4 x Linear(4096, 4096), batch 8192, Adam, "
              f"{reps_text(reps, *names)}\n")
        table(["mode", "ember ms", "PyTorch ms", "ember / PyTorch", "<= 1.0x"], rows)


def digits(reps):
    names = ("digits_mlp.json",)
    peer = ("peer_train_step_digits.json", "peer_train_step.json")
    ours = collect(reps, names, row_key)
    py = collect(reps, peer, row_key)
    rows = []
    for impl in ("eager", "graphed"):
        k = ("digits mlp step", "f32", "64-128-64-10, b64", impl)
        if k not in ours:
            continue
        r = ratio_series(reps, names, row_key, peer, row_key, k)
        rows.append([impl, ours[k].fmt(), py.get(k, Series()).fmt(), rfmt(r), verdict(r, 1.0)])
        TARGETS.append(("14", f"digits MLP step {impl} <= 1.0x PyTorch", r, 1.0))
        if impl == "graphed":
            TARGETS.append(("28", "digits MLP step graphed <= 1.0x PyTorch", r, 1.0))
    if rows:
        print(f"### Digits MLP step (64-128-64-10, batch 64, cross-entropy, Adam), "
              f"{reps_text(reps, *names)}\n")
        table(["impl", "ember ms", "PyTorch ms", "ember / PyTorch", "<= 1.0x"], rows)


def linear(reps):
    lin_key = lambda r: (r["workload"], r["dtype"], r["shape"], r["impl"])  # noqa: E731
    ours = collect(reps, ("linear.json",), lin_key)
    if not ours:
        return
    peer_key = lambda q: (q["workload"], q["dtype"], q["shape"])  # noqa: E731
    peer = collect(reps, ("peer.json",), peer_key)
    notes = {}
    for rep in reps:
        for q in load(rep, "linear.json"):
            notes[lin_key(q)] = q.get("note", "")
    print("### Linear (ms; ratio = ours / PyTorch time, lower is better), "
          f"{reps_text(reps, 'linear.json')}\n")
    print("The products of the backward (d_x, d_w+d_b) compare with cuBLAS only (their note); "
          "tile and schedule rows compare with PyTorch's forward.\n")
    rows = []
    for k, s in ours.items():
        pk = ("fwd" if k[0] in ("fwd tile", "fwd sched") else k[0], k[1], k[2])
        r = Series()
        for rep in reps:  # per repetition: ours against the peer's row of the same run
            o = {lin_key(q): q for q in load(rep, "linear.json")}
            p = {peer_key(q): q for q in load(rep, "peer.json")}
            if k in o and pk in p:
                r.add(o[k]["ms"] / p[pk]["ms"])
        rows.append([k[0], k[1], k[2], k[3], s.fmt(), notes.get(k, ""),
                     peer.get(pk, Series()).fmt(), rfmt(r)])
        if k[0] == "fwd+bwd op" and k[3] == "auto" and k[2] == "8192x4096->4096":
            TARGETS.append(("5", f"Linear fwd+bwd {k[1]} 8192x4096->4096 <= 1.0x PyTorch", r, 1.0))
    table(["workload", "dtype", "shape", "impl", "ms", "note (last repetition)", "PyTorch ms",
           "ours / PyTorch"], rows)
    # Issue 28: the Hopper GEMM's forward at least cuBLASLt's speed at 8192x4096->4096 bf16,
    # read as ours / cuBLAS(Lt)'s time in the same repetition (<= 1.0x).
    per_rep = [{lin_key(q): q for q in load(rep, "linear.json")} for rep in reps]
    for k in ours:
        if (k[0], k[1], k[2]) == ("fwd", "bf16", "8192x4096->4096") and \
                k[3].startswith("ours ") and "composed" not in k[3]:
            r = Series()
            for o in per_rep:
                c = o.get((k[0], k[1], k[2], "cublas"))
                if k in o and c and c["ms"] > 0:
                    r.add(o[k]["ms"] / c["ms"])
            TARGETS.append(("28", f"Hopper GEMM ({k[3]}) fwd bf16 8192x4096->4096 <= 1.0x "
                            "cuBLASLt's time", r, 1.0))


def mse(reps):
    key = lambda r: (r["workload"], r["dtype"])  # noqa: E731
    ours = collect(reps, ("mse.json",), key)
    if not ours:
        return
    peer_key = lambda r: (r["workload"], r["dtype"])  # noqa: E731
    print("### MSE forward + backward, 2^28 elements\n")
    rows = []
    for k, s in ours.items():
        r = Series()
        for rep in reps:
            o = {key(q): q for q in load(rep, "mse.json")}
            p = {peer_key(q): q for q in load(rep, "peer.json")}
            pk = ("mse_loss fwd+bwd op", k[1])
            if k in o and pk in p and "mse" in k[0]:
                r.add(o[k]["ms"] / p[pk]["ms"])
        note = load(reps[0], "mse.json")
        note = next((q["note"] for q in note if key(q) == k), "")
        rows.append([k[0], k[1], s.fmt(), note, rfmt(r)])
        if k[0] == "mse_loss fwd+bwd op":
            TARGETS.append(("5", f"MSE fwd+bwd {k[1]} <= 0.35x PyTorch", r, 0.35))
    table(["workload", "dtype", "ms", "note (first run)", "ours / PyTorch"], rows)


def adam(reps):
    key = lambda r: (r["workload"], r["impl"])  # noqa: E731
    ours = collect(reps, ("adam.json",), key)
    if not ours:
        return
    print("### Optimizer step (fp32): ember's step() against PyTorch's fused step()\n")
    rows = []
    for k, s in ours.items():
        r = ratio_series(reps, ("adam.json",), key, ("peer.json",), key, k)
        rows.append([k[0], k[1], s.fmt(), rfmt(r)])
        TARGETS.append(("5", f"{k[1]} step {k[0]} <= 1.0x PyTorch fused", r, 1.0))
    table(["params", "optimizer", "ms", "ours / PyTorch (fused)"], rows)


def fused(reps, name, title, op_workload, target, more=()):
    """A fused-op benchmark (cross_entropy.json, layer_norm.json): every row, and the
    op's row against PyTorch's op of the same workload, per repetition; more: (issue,
    dtype, target) of later issues' targets for the op's row of that dtype."""
    def variant(r):  # rows of one workload differ by the block shape named in the note
        m = re.search(r"\(([^)]*)\)\s*$", r.get("note", ""))
        return m.group(1) if m and r["workload"] != op_workload else ""
    key = lambda r: (r["workload"], r["dtype"], r["shape"], r["impl"], variant(r))  # noqa: E731
    ours = collect(reps, (name,), key)
    if not ours:
        return
    print(f"### {title}, {reps_text(reps, name)}\n")
    rows = []
    for k, s in ours.items():
        r = Series()
        if k[0] == op_workload:
            for rep in reps:
                o = {key(q): q for q in load(rep, name)}
                p = {(q["workload"], q["dtype"], q["shape"]): q for q in load(rep, "peer.json")}
                if k in o and (k[0], k[1], k[2]) in p:
                    r.add(o[k]["ms"] / p[(k[0], k[1], k[2])]["ms"])
            TARGETS.append(("14", f"{op_workload} {k[1]} {k[2]} <= {target}x PyTorch", r, target))
            for issue, dtype, t in more:
                if k[1] == dtype:
                    TARGETS.append((issue, f"{op_workload} {k[1]} {k[2]} <= {t}x PyTorch", r, t))
        note = next((q.get("note", "") for q in load(reps[-1], name) if key(q) == k), "")
        rows.append([k[0], k[1], k[2], k[3], s.fmt(), note, rfmt(r)])
    table(["workload", "dtype", "shape", "impl", "ms", "note (last run)", "ours / PyTorch"], rows)


def op_overhead(reps):
    key = lambda r: (r["workload"].strip(), r["device"], r["shape"])  # noqa: E731
    ns = collect(reps, ("op_overhead.json",), key, "host_ns_per_op")
    if not ns:
        return
    ratio = collect(reps, ("op_overhead.json",), key, "ratio_to_bare_launch")
    print("### Eager per-op host overhead (ns per op), ember's own breakdown\n")
    rows = []
    for k, s in ns.items():
        r = ratio.get(k)
        has_ratio = r is not None and r.median() > 0
        rows.append([k[0], k[1], k[2], s.fmt(0), rfmt(r) if has_ratio else "-"])
        if has_ratio and k[1] == "cuda:0" and k[2] == "[16]" and k[0] in ("add, no grad", "add, inputs require grad"):
            TARGETS.append(("8", f"{k[0]} [16] cuda <= 1.5x a bare launch", r, 1.5))
    table(["workload", "device", "shape", "host ns/op", "ratio to a bare launch"], rows)


def paired(reps, ours_file, peer_file, title, targets=(), versus=""):
    """A generic section: ember's rows of ours_file against the peer's rows of
    peer_file with the same (workload, dtype, shape); targets are (issue, workload,
    dtype, target ratio) entries added to the Targets table, their text ending in
    versus (what the ratio is against) when given."""
    key = lambda r: (r["workload"], r["dtype"], r["shape"])
    ours = collect(reps, (ours_file,), key)
    peer = collect(reps, (peer_file,), key)
    rows = []
    for k in ours:
        r = ratio_series(reps, (ours_file,), key, (peer_file,), key, k)
        rows.append([k[0], k[1], k[2], ours[k].fmt(), peer.get(k, Series()).fmt(), rfmt(r)])
    for issue, workload, dtype, target, *shape in targets:  # an optional 5th: one shape only
        want = [k for k in ours if k[0] == workload and k[1] == dtype and
                (not shape or k[2] == shape[0])]
        for k in want:
            what = f"{workload} {dtype}{' ' + k[2] if shape else ''} <= {target}x"
            what += f" {versus}" if versus else ""
            TARGETS.append((issue, what,
                            ratio_series(reps, (ours_file,), key, (peer_file,), key, k), target))
    if rows:
        print(f"### {title}, {reps_text(reps, ours_file)}\n")
        table(["workload", "dtype", "shape", "ember ms", "peer ms", "ember / peer"], rows)


def elementwise(reps):
    """bench_elementwise: each case with the strided kernels (impl ours) and the vector
    kernels (ours-vec) against PyTorch's same work, per repetition."""
    key = lambda r: (r["workload"], r["dtype"], r["shape"], r["impl"])  # noqa: E731
    peer_key = lambda r: (r["workload"], r["dtype"], r["shape"])  # noqa: E731
    ours = collect(reps, ("elementwise.json",), key)
    if not ours:
        return
    peer = collect(reps, ("peer_elementwise.json",), peer_key)
    rows = []
    for k, s in ours.items():
        r = Series()
        for rep in reps:
            o = {key(q): q for q in load(rep, "elementwise.json")}
            p = {peer_key(q): q for q in load(rep, "peer_elementwise.json")}
            if k in o and k[:3] in p and p[k[:3]]["ms"] > 0:
                r.add(o[k]["ms"] / p[k[:3]]["ms"])
        note = next((q.get("note", "") for q in load(reps[-1], "elementwise.json")
                     if key(q) == k), "")
        rows.append([k[0], k[1], k[3], s.fmt(), note, peer.get(k[:3], Series()).fmt(), rfmt(r)])
    print(f"### Element-wise work of GPT-2's step (16x1024x768), "
          f"{reps_text(reps, 'elementwise.json')}\n")
    table(["workload", "dtype", "impl", "ms", "note (last run)", "PyTorch ms", "ours / PyTorch"],
          rows)


def against_best(reps, ours_file, peer_file, ours_want, peer_wants, issue, what, target):
    """A target read against the peer's best: per repetition, ours_want's time over the
    least of the peer's peer_wants rows (e.g. PyTorch's TF32 and bf16 ResNet steps)."""
    key = lambda r: (r["workload"], r["dtype"], r["shape"])
    s = Series()
    for rep in reps:
        o = {key(r): r for r in load(rep, ours_file)}
        p = {key(r): r for r in load(rep, peer_file)}
        best = [p[k]["ms"] for k in peer_wants if k in p and p[k]["ms"] > 0]
        if ours_want in o and best:
            s.add(o[ours_want]["ms"] / min(best))
    if s:
        TARGETS.append((issue, what, s, target))


def gpt(reps):
    """bench_gpt (gpt.json) against peer_gpt.py (peer_gpt.json): ember / eager and
    ember / torch.compile per shape; issue 28's targets against torch.compile (the char
    shape <= 0.90x, GPT-2 124M <= 0.95x) for each ember row."""
    names, peer = ("gpt.json",), ("peer_gpt.json",)
    ours = collect(reps, names, row_key)
    py = collect(reps, peer, row_key)
    notes = {}
    for rep in reps:
        for r in load(rep, *names, *peer):
            notes[row_key(r)] = r.get("note", "")
    rows = []
    shapes = (("gpt char step", "6x384 T256 b64"), ("gpt2-124M step", "12x768 T1024 b16"))
    # bench_gpt's "... graphed" rows (cuda::Graph replays) against the same eager peers.
    for name, shape in [(n + g, s) for n, s in shapes for g in ("", " graphed")]:
        k = (name, "bf16", shape, "ember")
        if k not in ours:
            continue
        cells = [name, ours[k].fmt(), notes.get(k, "")]
        for impl in ("eager", "torch.compile"):
            pk = (name.replace(" graphed", ""), "bf16", shape, impl)
            r = Series()
            for rep in reps:
                o = {row_key(x): x for x in load(rep, *names)}
                p_ = {row_key(x): x for x in load(rep, *peer)}
                if k in o and pk in p_ and p_[pk]["ms"] > 0:
                    r.add(o[k]["ms"] / p_[pk]["ms"])
            cells += [py.get(pk, Series()).fmt(), notes.get(pk, ""), rfmt(r)]
            if impl == "torch.compile":
                t = 0.90 if name.startswith("gpt char") else 0.95
                TARGETS.append(("28", f"{name} <= {t}x torch.compile", r, t))
        rows.append(cells)
    if rows:
        print(f"### GPT training step (bf16 autocast, fused AdamW, clip 1.0), "
              f"{reps_text(reps, *names)}\n")
        table(["shape", "ember ms", "ember", "eager ms", "eager", "ember / eager",
               "compile ms", "compiled", "ember / compile"], rows)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    reps = reps_of(d)
    host_bound(reps)
    mlp(reps)
    digits(reps)
    linear(reps)
    mse(reps)
    adam(reps)
    fused(reps, "cross_entropy.json", "Cross-entropy forward + backward, 8192 x 32768 (GB/s: one "
          "read of the logits, one write of their gradient)", "cross_entropy fwd+bwd op", 0.6,
          [("28", "bf16", 0.5)])
    fused(reps, "layer_norm.json", "Layer norm forward + backward, 8192 x 4096",
          "layer_norm fwd+bwd op", 0.8, [("28", "bf16", 0.7)])
    op_overhead(reps)
    paired(reps, "conv.json", "peer_conv.json",
           "Convolution, batch norm, ResNet-8 step: ember (im2col kernel + GEMM, fused batch norm) "
           "against PyTorch (cuDNN)",
           [("29", "conv3x3 fwd+bwd", "bf16", 1.2), ("29", "batch_norm2d fwd+bwd", "f32", 0.8)])
    resnet = [("resnet8 step", dt, "b128 3x32x32") for dt in ("tf32", "bf16")]
    against_best(reps, "conv.json", "peer_conv.json", resnet[0], resnet, "29",
                 "resnet8 step eager <= 1.0x PyTorch's best (TF32 or bf16)", 1.0)
    against_best(reps, "conv.json", "peer_conv.json",
                 ("resnet8 step graphed", "tf32", "b128 3x32x32"), resnet, "29",
                 "resnet8 step graphed <= 0.7x PyTorch's best eager", 0.7)
    # Ours under bf16 autocast, against the same best of PyTorch's two.
    against_best(reps, "conv.json", "peer_conv.json", resnet[1], resnet, "29",
                 "resnet8 step bf16 eager <= 1.0x PyTorch's best (TF32 or bf16)", 1.0)
    against_best(reps, "conv.json", "peer_conv.json",
                 ("resnet8 step graphed", "bf16", "b128 3x32x32"), resnet, "29",
                 "resnet8 step bf16 graphed <= 0.7x PyTorch's best eager", 0.7)
    gpt(reps)
    elementwise(reps)
    paired(reps, "attention.json", "peer_attention.json",
           "Fused attention (bf16): ember against PyTorch's sdpa (the faster of flash and cuDNN)",
           [("27", "attention fwd", "bf16", 0.85, "B8 H16 T2048 D128 causal"),
            ("27", "attention fwd+bwd", "bf16", 0.90, "B8 H16 T2048 D128 causal"),
            ("27", "attention fwd+bwd", "bf16", 1.0, "B8 H16 T1024 D64 causal"),
            ("27", "attention fwd+bwd", "bf16", 1.0, "B16 H12 T1024 D64 causal"),
            ("27", "attention fwd+bwd", "bf16", 1.0, "B16 H12 T1024 D64 full")])
    # Issue 27: never slower than the composed path at any tested shape (the fused rows'
    # "peer" here is bench_attention --composed of the same repetition).
    if any(load(rep, "attention_composed.json") for rep in reps):
        att_rows = {(r["workload"], r["dtype"], r["shape"]) for rep in reps
                    for r in load(rep, "attention.json")}
        paired(reps, "attention.json", "attention_composed.json",
               "Fused attention (bf16): the fused kernels against ember's composed path",
               [("27", w, d, 1.0, shape) for w, d, shape in sorted(att_rows)],
               versus="ember's composed path")
    if TARGETS:
        print("### Targets\n")
        print("Met only when the whole range of the ratio is at or below the target, missed "
              "only when it is all above; otherwise undecided. A verdict from fewer than "
              f"{MIN_REPS} repetitions is marked provisional.\n")
        table(["issue", "target", "ratio: median [range]", "repetitions", "verdict"],
              [[i, what, rfmt(r), len(r.values), verdict(r, t)] for i, what, r, t in TARGETS])


if __name__ == "__main__":
    main()
