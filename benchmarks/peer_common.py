"""What the PyTorch peers share: CUDA-event timing and ember's checkpoint reader.

Imported by the peer_*.py scripts beside it (their directory is on sys.path when
they run as scripts)."""
import statistics
import struct


def event_ms(torch, f, warmup=3, iters=20):
    """(median, min, max) milliseconds of f() on the current CUDA stream, each call
    between two CUDA events, after `warmup` calls."""
    for _ in range(warmup):
        f()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        f()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times), min(times), max(times)


def read_ember_checkpoint(path):
    """{name: (dtype code, sizes, bytes)} of a file in ember's checkpoint format
    (nn/checkpoint.h: 40-byte header, then name, dtype, dims, sizes, data per entry)."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:8] != b"EMBERCKP":
        raise ValueError(f"{path}: not an ember checkpoint")
    count = struct.unpack_from("<I", raw, 12)[0]
    pos, out = 40, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<I", raw, pos)
        name = raw[pos + 4:pos + 4 + n].decode()
        pos += 4 + n
        code, ndim = raw[pos], raw[pos + 1]
        pos += 4
        sizes = list(struct.unpack_from(f"<{ndim}q", raw, pos))
        pos += 8 * ndim
        (nbytes,) = struct.unpack_from("<Q", raw, pos)
        pos += 8
        if pos + nbytes > len(raw):
            raise ValueError(f"{path}: entry {name} runs past the end of the file")
        out[name] = (code, sizes, raw[pos:pos + nbytes])
        pos += nbytes
    return out
