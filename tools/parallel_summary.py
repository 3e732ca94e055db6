#!/usr/bin/env python3
"""The summary tools/gpu_parallel.sh prints last: its steps, then bench_parallel
beside benchmarks/peer_parallel.py, each figure the median over the
repetitions with the min-max spread, and issue 18's targets.

    python3 tools/parallel_summary.py OUT_DIR N_GPUS REPS_ASKED

It reads OUT_DIR/{steps.tsv, gpu.txt, reps.txt, ours_<i>.json, peer_<i>.json,
breakdown.log, peer_breakdown.log, ours_socket.json, peer_socket.json, *.log}.
"""
import glob
import json
import os
import re
import statistics
import sys


def load(path):
    try:
        return json.load(open(path))["rows"]
    except Exception:
        return []


def gpus(k):
    return f"{k} GPU" if k == 1 else f"{k} GPUs"


class Runs:
    """Rows of several repetitions: (workload, shape, impl) -> list of rows."""

    def __init__(self, paths):
        self.by_key = {}
        self.count = 0
        for p in paths:
            rows = load(p)
            if rows:
                self.count += 1
            for r in rows:
                self.by_key.setdefault((r["workload"], r["shape"], r["impl"]), []).append(r)

    def values(self, workload, shape, impl, field="ms"):
        return [r[field] for r in self.by_key.get((workload, shape, impl), [])]

    def med(self, workload, shape, impl, field="ms"):
        v = self.values(workload, shape, impl, field)
        return statistics.median(v) if v else None

    def cell(self, workload, shape, impl, field="ms", fmt="{:.3f}"):
        v = self.values(workload, shape, impl, field)
        if not v:
            return "-"
        m = statistics.median(v)
        if len(v) == 1:
            return fmt.format(m)
        return f"{fmt.format(m)} [{fmt.format(min(v))}-{fmt.format(max(v))}]"

    def notes(self, workload, shape, impl):
        return [r["note"] for r in self.by_key.get((workload, shape, impl), [])]


def ratio(a, b, fmt="{:.3f}"):
    return fmt.format(a / b) if a is not None and b else "-"


def block(log, start_pattern, end_pattern):
    """The lines of `log` from one matching start_pattern through end_pattern."""
    out, inside = [], False
    try:
        lines = open(log, errors="replace").read().splitlines()
    except OSError:
        return out
    for line in lines:
        if re.search(start_pattern, line):
            inside, out = True, []
        if inside:
            out.append(line)
            if re.search(end_pattern, line):
                inside = False
    return out


def main():
    d, n, asked = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    reps = sorted(glob.glob(os.path.join(d, "ours_[0-9]*.json")))
    peers = sorted(glob.glob(os.path.join(d, "peer_[0-9]*.json")))
    ours, peer = Runs(reps), Runs(peers)
    ours_sock = Runs([os.path.join(d, "ours_socket.json")])
    peer_sock = Runs([os.path.join(d, "peer_socket.json")])
    ours_bd = Runs([os.path.join(d, "breakdown.json")])
    peer_bd = Runs([os.path.join(d, "peer_breakdown.json")])
    g = gpus(n)
    gpu = open(os.path.join(d, "gpu.txt")).read().splitlines() if os.path.exists(
        os.path.join(d, "gpu.txt")) else []
    print(f"\n== gpu_parallel summary: {g}; {gpu[1] if len(gpu) > 1 else ''}")
    print(f"repetitions: ours {ours.count}, PyTorch {peer.count} (asked {asked}); figures are "
          f"medians over them, [min-max] the spread")

    print("\nsteps (rc 0 = passed; a rank_killed step's rc is the killed rank's, judged by its lines):")
    for line in open(os.path.join(d, "steps.tsv")):
        name, rc, s = line.rstrip("\n").split("\t")
        extra = ""
        log = os.path.join(d, name + ".log")
        if os.path.exists(log):
            text = open(log, errors="replace").read()
            m = re.findall(r"\[doctest\] test cases:.*", text)
            extra = m[-1] if m else ""
            if name.startswith("rank_killed"):
                extra = "; ".join(re.findall(
                    r"rank-killed probe: (rank \d+: [a-z ]+|skipped)", text)[:8])
            if name == "seed_train":
                extra = "; ".join(re.findall(r"seed_train: .*", text)[:1])
        print(f"  {name:<22} rc={rc:<8} {s:>4} s  {extra}")

    # --- all-reduce
    print(f"\nall-reduce, float32 sum, {g}: time in ms (ratio = ember / torch, target <= 1.05 at "
          "every size)")
    print("| size | ember Communicator | raw NCCL (same comm) | torch.distributed | ember/torch | "
          "ember, non-blocking comm | raw NCCL, non-blocking | busbw ember GB/s | busbw torch GB/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    missed, measured = [], 0
    sizes = []
    for (w, sh, impl) in ours.by_key:
        if w == "all_reduce" and impl == "ember" and sh not in sizes:
            sizes.append(sh)
    for sh in sizes:
        e, t = ours.med("all_reduce", sh, "ember"), peer.med("all_reduce", sh, "torch")
        if e is not None and t:
            measured += 1
            if e / t > 1.05:
                missed.append(sh.split(" x ")[0])
        print(f"| {sh.split(' x ')[0]} | {ours.cell('all_reduce', sh, 'ember')} | "
              f"{ours.cell('all_reduce', sh, 'nccl')} | {peer.cell('all_reduce', sh, 'torch')} | "
              f"{ratio(e, t)} | {ours.cell('all_reduce', sh, 'ember nb')} | "
              f"{ours.cell('all_reduce', sh, 'nccl nb')} | "
              f"{ours.cell('all_reduce', sh, 'ember', 'rate', '{:.1f}')} | "
              f"{peer.cell('all_reduce', sh, 'torch', 'rate', '{:.1f}')} |")
    grp = [sh for sh in sizes if ours.values("all_reduce", sh, "ember grp")]
    if grp:
        print(f"\nDataParallel's one-process group all-reduce, {g}: ms")
        print("| size | ember group | raw NCCL group | ours/raw |")
        print("|---|---|---|---|")
        for sh in grp:
            print(f"| {sh.split(' x ')[0]} | {ours.cell('all_reduce', sh, 'ember grp')} | "
                  f"{ours.cell('all_reduce', sh, 'nccl grp')} | "
                  f"{ratio(ours.med('all_reduce', sh, 'ember grp'), ours.med('all_reduce', sh, 'nccl grp'))} |")

    # --- breakdown (one run each)
    print("\nwhere a small all-reduce's time goes (one run; microseconds):")
    for line in block(os.path.join(d, "breakdown.log"), r"^NCCL runtime", r"^8 MiB +non-block +back"):
        print("  " + line)
    for line in block(os.path.join(d, "peer_breakdown.log"), r"^NCCL .*torch's", r"^8 MiB "):
        print("  " + line)
    print("| size | ember total us | raw NCCL total us | torch total us | ember device us | "
          "torch device us | back to back: ember / raw / torch us per call |")
    print("|---|---|---|---|---|---|---|")
    for size in ("256 KiB", "1 MiB", "8 MiB"):
        sh = f"{size} blocking"
        e = ours_bd.med("ar breakdown", sh, "ember")
        r = ours_bd.med("ar breakdown", sh, "nccl")
        t = peer_bd.med("ar breakdown", f"{size} torch", "torch")
        ed = ours_bd.med("ar breakdown", sh, "ember", "rate")
        td = peer_bd.med("ar breakdown", f"{size} torch", "torch", "rate")
        q = [ours_bd.med("ar back-to-back", sh, "ember"), ours_bd.med("ar back-to-back", sh, "nccl"),
             peer_bd.med("ar back-to-back", f"{size} torch", "torch")]
        f = lambda v, k=1e3: f"{v * k:.1f}" if v is not None else "-"
        print(f"| {size} | {f(e)} | {f(r)} | {f(t)} | {f(ed, 1)} | {f(td, 1)} | "
              f"{' / '.join(f(x) for x in q)} |")

    # --- training steps
    print(f"\nMLP training step (4 x Linear(4096, 4096), 256 samples per GPU, fp32): ms, ratio = "
          "ember / PyTorch (lower is better)")
    print("| mode | GPUs | ember ms | PyTorch ms | ember/PyTorch | ember efficiency | "
          "PyTorch efficiency |")
    print("|---|---|---|---|---|---|---|")
    eff = {}
    for wl, mode, impl_e, impl_t in (("mlp step DDP", "DDP", "ember", "torch"),
                                      ("mlp step DDP", "DDP, bf16 gradients", "ember bf16", "torch bf16"),
                                      ("mlp step DP", "DataParallel", "ember", "torch"),
                                      ("mlp step DDP Adam", "DDP + Adam", "ember", "torch"),
                                      ("mlp step ZeRO Adam", "ZeRO-1 Adam", "ember", "torch")):
        one_e = ours.med(wl if "bf16" not in impl_e else "mlp step DDP", f"1 GPU x 256", "ember")
        one_t = peer.med(wl if "bf16" not in impl_t else "mlp step DDP", f"1 GPU x 256", "torch")
        for k in range(1, n + 1):
            sh = f"{gpus(k)} x 256"
            a, b = ours.med(wl, sh, impl_e), peer.med(wl, sh, impl_t)
            if a is None and b is None:
                continue
            # Efficiency (k x 256 / t_k) / (k x 256 / t_1) = t_1 / t_k: 256 rows per GPU.
            ee = f"{one_e / a:.3f}" if a and one_e and "Adam" not in wl else "-"
            te = f"{one_t / b:.3f}" if b and one_t and "Adam" not in wl else "-"
            eff[(mode, k)] = (a, b, ee, te)
            print(f"| {mode} | {k} | {ours.cell(wl, sh, impl_e)} | {peer.cell(wl, sh, impl_t)} | "
                  f"{ratio(a, b)} | {ee} | {te} |")

    # --- memory
    print("\nmemory")
    dp_e = ours.med("dp peak max/min", f"{g} x 256", "ember", "rate")
    dp_t = peer.med("dp peak max/min", f"{g} x 256", "torch", "rate")
    print(f"  DataParallel peak allocated, largest / smallest GPU: ember "
          f"{ours.cell('dp peak max/min', f'{g} x 256', 'ember', 'rate', '{:.3f}')} "
          f"({'; '.join(ours.notes('dp peak max/min', f'{g} x 256', 'ember')[:1])}), PyTorch "
          f"{peer.cell('dp peak max/min', f'{g} x 256', 'torch', 'rate', '{:.3f}')} "
          f"({'; '.join(peer.notes('dp peak max/min', f'{g} x 256', 'torch')[:1])})")
    for wl in ("mlp step DDP Adam", "mlp step ZeRO Adam"):
        print(f"  {wl[9:]}: ember {'; '.join(ours.notes(wl, f'{g} x 256', 'ember')[:1]) or '-'}; "
              f"PyTorch {'; '.join(peer.notes(wl, f'{g} x 256', 'torch')[:1]) or '-'}")
    last = sorted(glob.glob(os.path.join(d, "ours_[0-9]*.log")))
    if last:
        for start, end in ((r"^memory_summary_all after", r"^Peak allocated, largest"),
                           (r"^memory_summary_all_ranks after ZeRO", r"^Peak allocated, largest")):
            for line in block(last[-1], start, end):
                print("  " + line)

    # --- socket transport
    if ours_sock.count or peer_sock.count:
        print(f"\nsocket transport (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1, "
              f"loopback), {g}, one run: busbw GB/s (ms)")
        print("| size | ember | torch |")
        print("|---|---|---|")
        for (w, sh, impl) in ours_sock.by_key:
            if w == "all_reduce" and impl == "ember socket":
                e = ours_sock.by_key[(w, sh, impl)][0]
                t = (peer_sock.by_key.get((w, sh, "torch socket")) or [None])[0]
                tt = f"{t['rate']:.1f} ({t['ms']:.3f})" if t else "-"
                print(f"| {sh.split(' x ')[0]} | {e['rate']:.1f} ({e['ms']:.3f}) | {tt} |")
        for k in range(1, n + 1):
            rows = ours_sock.by_key.get(("mlp step DDP", f"{gpus(k)} x 256", "ember socket"))
            if rows:
                print(f"  DDP step over sockets, {gpus(k)}: {rows[0]['ms']:.3f} ms, {rows[0]['note']}")

    # --- targets
    print("\ntargets (issue 18):")
    if measured:
        print(f"  Communicator::all_reduce <= 1.05x torch.distributed at every size 256 KiB..256 MiB: "
              f"{'met' if not missed else 'MISSED at ' + ', '.join(missed)} ({measured} sizes)")
    else:
        print("  all-reduce: no rows")
    dn = eff.get(("DDP", n))
    if dn and n > 1:
        a, b, ee, te = dn
        try:
            ok_eff = float(ee) >= 0.90
        except ValueError:
            ok_eff = False
        print(f"  DDP {g} scaling efficiency >= 0.90: {ee} {'met' if ok_eff else 'MISSED'} "
              f"(PyTorch {te})")
        if a and b:
            print(f"  DDP {g} step <= 0.95x PyTorch DDP's: {a:.3f} vs {b:.3f} ms, ratio {a / b:.3f} "
                  f"{'met' if a <= 0.95 * b else 'MISSED'}")
    elif n == 1:
        print("  DDP scaling: not measurable on 1 GPU")
    if dp_e is not None:
        print(f"  DataParallel peak allocated max/min <= 1.10: {dp_e:.3f} "
              f"{'met' if dp_e <= 1.10 else 'MISSED'} (PyTorch {dp_t:.3f})" if dp_t else
              f"  DataParallel peak allocated max/min <= 1.10: {dp_e:.3f} "
              f"{'met' if dp_e <= 1.10 else 'MISSED'}")
    e256, n256 = ours.med("all_reduce", f"256 MiB x {g}", "ember"), ours.med("all_reduce", f"256 MiB x {g}", "nccl")
    if e256 and n256:
        print(f"  (issue 6) all-reduce within 5% of NCCL's own at 256 MiB: time NCCL/ours "
              f"{n256 / e256:.3f}")


if __name__ == "__main__":
    main()
