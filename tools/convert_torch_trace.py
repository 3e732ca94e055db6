#!/usr/bin/env python3
"""Converts PyTorch's allocator trace to ember's trace CSV (core/memory/trace.h).

Input: what torch.cuda.memory._snapshot() returns, saved as a pickle (as
torch.cuda.memory._dump_snapshot(path) writes it) or as JSON. Its
"device_traces" holds, per device, the allocator events recorded since
torch.cuda.memory._record_memory_history(): dicts with "action", "addr",
"size", "stream" (and more, unused here).

Output: the rows "action,addr,size,stream" for the actions alloc,
free_requested, free_completed, segment_alloc and segment_free (PyTorch records
requested sizes for the first three and segment sizes for the others, as ember
does). PyTorch's other actions (snapshot, oom, segment_map, segment_unmap of
expandable segments, user_defined) have no row; how many were dropped is written
as metadata. Blocks that the trace frees without having allocated them (they were
live before recording began, or the ring buffer dropped their alloc) are
allocated first, in address order, so the trace replays; their number is the
metadata "prelude_allocs".

Needs only the Python standard library (no torch): the snapshot is plain dicts.

  tools/convert_torch_trace.py snapshot.pickle -o trace.csv [--device N] [--meta key=value ...]
"""

import argparse
import json
import pickle
import sys

ROW_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free")
# Actions PyTorch records that ember's format has no row for.
SKIPPED_ACTIONS = ("snapshot", "oom", "segment_map", "segment_unmap", "user_defined")
HEADER = "action,addr,size,stream"
MAX_SIZE = 1 << 62  # the largest size ember's reader accepts


class ConvertError(Exception):
    pass


def load_snapshot(path):
    """The snapshot dict from a pickle or JSON file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:1] == b"\x80":  # a pickle's protocol marker
        try:
            return pickle.loads(data)
        except Exception as e:  # noqa: BLE001 (any unpickling failure is the file's fault)
            raise ConvertError(f"{path}: not a readable pickle ({e})") from e
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConvertError(f"{path}: neither a pickle nor JSON ({e})") from e


def pick_device(traces, device):
    if not isinstance(traces, list):
        raise ConvertError("'device_traces' is not a list (one list of events per device)")
    if device is not None:
        if not 0 <= device < len(traces):
            raise ConvertError(f"--device {device}: the snapshot has traces for {len(traces)} device(s)")
        return device
    busy = [i for i, t in enumerate(traces) if t]
    if not busy:
        raise ConvertError("the snapshot's device_traces are all empty: was "
                           "torch.cuda.memory._record_memory_history() on?")
    if len(busy) > 1:
        raise ConvertError(f"devices {busy} all have events: choose one with --device")
    return busy[0]


def field(entry, index, name):
    value = entry.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConvertError(f"event {index} ({entry.get('action')}): '{name}' is "
                           f"{value!r}, not an integer")
    if value < 0:
        raise ConvertError(f"event {index} ({entry.get('action')}): '{name}' is negative ({value})")
    return value


def convert(snapshot, device=None):
    """(rows, metadata): rows are (action, addr, size, stream) tuples, oldest first."""
    if not isinstance(snapshot, dict) or "device_traces" not in snapshot:
        raise ConvertError("not a torch.cuda.memory._snapshot(): no 'device_traces' key")
    traces = snapshot["device_traces"]
    device = pick_device(traces, device)
    rows, skipped = [], {}
    for i, e in enumerate(traces[device]):
        if not isinstance(e, dict) or "action" not in e:
            raise ConvertError(f"event {i}: not a dict with an 'action'")
        action = e["action"]
        if action in SKIPPED_ACTIONS:
            skipped[action] = skipped.get(action, 0) + 1
            continue
        if action not in ROW_ACTIONS:
            raise ConvertError(f"event {i}: unknown action {action!r} (expected one of "
                               f"{', '.join(ROW_ACTIONS + SKIPPED_ACTIONS)})")
        addr, size, stream = (field(e, i, k) for k in ("addr", "size", "stream"))
        if size > MAX_SIZE:
            raise ConvertError(f"event {i} ({action}): size {size} is above 2^62 bytes")
        if addr >= 1 << 64 or stream >= 1 << 64:
            raise ConvertError(f"event {i} ({action}): addr or stream does not fit 64 bits")
        rows.append((action, addr, size, stream))

    # Blocks live before the trace began: their first row is a free.
    first = {}
    for action, addr, size, stream in rows:
        if action.startswith("segment_") or addr in first:
            continue
        first[addr] = (action, size, stream)
    prelude = []
    for addr in sorted(first):
        action, size, stream = first[addr]
        if action == "alloc":
            continue
        prelude.append(("alloc", addr, size, stream))
        if action == "free_completed":  # it was waiting on other streams already
            prelude.append(("free_requested", addr, size, stream))
    meta = [("source", f"torch.cuda.memory._snapshot() device_traces[{device}]"),
            ("converted_by", "tools/convert_torch_trace.py")]
    if prelude:
        meta.append(("prelude_allocs", str(sum(1 for r in prelude if r[0] == "alloc"))))
    for action in sorted(skipped):
        meta.append((f"dropped_{action}", str(skipped[action])))
    segments = snapshot.get("segments")
    if isinstance(segments, list):
        total = sum(s.get("total_size", 0) for s in segments
                    if isinstance(s, dict) and s.get("device", device) == device)
        meta.append(("snapshot_reserved_bytes", str(total)))
    return prelude + rows, meta


def write_csv(rows, meta, out):
    out.write("# ember allocator trace v1\n")
    for key, value in meta:
        out.write(f"# {key}: {value}\n")
    out.write(HEADER + "\n")
    for action, addr, size, stream in rows:
        out.write(f"{action},0x{addr:x},{size},{stream}\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("snapshot", help="pickle or JSON of torch.cuda.memory._snapshot()")
    p.add_argument("-o", "--output", help="the CSV to write (default: stdout)")
    p.add_argument("--device", type=int, help="which device's trace (default: the one with events)")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                   help="extra metadata line (repeatable)")
    args = p.parse_args(argv)
    try:
        rows, meta = convert(load_snapshot(args.snapshot), args.device)
        for kv in args.meta:
            key, sep, value = kv.partition("=")
            if not sep or not key or " " in key:
                raise ConvertError(f"--meta {kv!r}: expected KEY=VALUE (no spaces in KEY)")
            meta.append((key, value))
        if args.output:
            with open(args.output, "w", encoding="utf-8", newline="\n") as f:
                write_csv(rows, meta, f)
        else:
            write_csv(rows, meta, sys.stdout)
    except (ConvertError, OSError) as e:
        print(f"convert_torch_trace: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
