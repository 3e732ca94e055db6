#!/usr/bin/env python3
"""The safetensors cross-check: files written by the reference implementation (the
Python package safetensors, from PyPI) read by ember, and files written by ember
read by it, bit for bit.

Usage: check_safetensors.py PROBE WORKDIR   (PROBE: the safetensors_probe binary)

1. Python writes every dtype ember reads (F32, F64, BF16, F16, I64, BOOL, a scalar,
   an empty tensor) with metadata; ember's dump must show the same bytes (F16
   as the exact float32 numpy computes).
2. ember copies a Python-written file (no F16, one metadata key): the copy must be
   byte-identical to the original (same order, header and padding).
3. ember writes its fixed tensors; Python's safe_open/deserialize must read the
   values recomputed here and the metadata.
4. Files ember refuses: the reference refuses them too (and ember names why).
Prints PASSED, or SKIPPED when the package is missing outside CI.
"""
import os
import struct
import subprocess
import sys

try:
    import numpy as np
    import safetensors
    from safetensors import deserialize, safe_open, serialize_file
except ImportError as e:  # the set-up script installs them (tools/ensure_deps.sh)
    msg = f"safetensors/numpy not importable by {sys.executable}: {e}; run tools/ensure_deps.sh"
    if os.environ.get("CI"):
        print("FAILED: " + msg)
        sys.exit(1)
    print("SKIPPED: " + msg)
    sys.exit(0)

probe, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def run(*args):
    r = subprocess.run([probe, *args], capture_output=True, text=True)
    return r.returncode, r.stdout


def dump(path):
    code, out = run("dump", path)
    check(code == 0, f"ember dump {path} exit {code}: {out.strip()}")
    meta, tensors = {}, {}
    for line in out.splitlines():
        if line.startswith("meta "):
            k, v = line[5:].split("=", 1)
            meta[k] = v
        elif line.startswith("tensor "):
            _, name, dtype, shape, data = line.split(" ")
            shape = [int(s) for s in shape.split(",")] if shape else []
            tensors[name] = (dtype, shape, b"" if data == "-" else bytes.fromhex(data))
    return meta, tensors


# serialize/serialize_file take raw tensors: dicts of dtype "F32", shape and bytes
# up to safetensors 0.7, TensorSpec(dtype "float32", shape, data_ptr, data_len)
# from 0.8 (whose buffers must stay alive until written: `keep`).
SPEC_NAMES = {"F32": "float32", "F64": "float64", "BF16": "bfloat16", "F16": "float16",
              "I64": "int64", "BOOL": "bool"}
keep = []


def spec(dtype, shape, data):
    if not hasattr(safetensors, "TensorSpec"):
        return {"dtype": dtype, "shape": list(shape), "data": data}
    buf = np.frombuffer(bytearray(data) or bytearray(1), dtype=np.uint8)
    keep.append(buf)
    return safetensors.TensorSpec(dtype=SPEC_NAMES[dtype], shape=list(shape),
                                  data_ptr=buf.ctypes.data, data_len=len(data))


def raw(dtype, arr):
    return spec(dtype, arr.shape, arr.tobytes())


rng = np.random.default_rng(31)
f32 = rng.standard_normal((3, 5)).astype(np.float32)
f64 = rng.standard_normal(4)
bf16_bits = (rng.standard_normal(6).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
f16 = np.array([1.0, -2.0, 65504.0, 2.0**-24, 0.1, np.inf, -0.0, 1 / 3], dtype=np.float16)
i64 = np.array([-(2**63), -1, 0, 2**63 - 1], dtype=np.int64)
b = np.array([True, False, False, True], dtype=np.bool_)
scalar = np.array(1.25, dtype=np.float32)
empty = np.zeros((0, 7), dtype=np.float32)

# 1. Python writes, ember reads.
py_all = os.path.join(work, "python_all.safetensors")
serialize_file(
    {
        "f32": raw("F32", f32),
        "f64": raw("F64", f64),
        "bf16": spec("BF16", [2, 3], bf16_bits.tobytes()),
        "f16": raw("F16", f16),
        "encoder.layers.0.i64": raw("I64", i64),
        "mask": raw("BOOL", b),
        "scalar": raw("F32", scalar),
        "empty": raw("F32", empty),
    },
    py_all,
    metadata={"format": "pt", "note": 'quotes " and \\ and é'},
)
meta, got = dump(py_all)
check(meta == {"format": "pt", "note": 'quotes " and \\ and é'}, f"metadata read by ember: {meta}")
want = {
    "f32": ("float32", [3, 5], f32.tobytes()),
    "f64": ("float64", [4], f64.tobytes()),
    "bf16": ("bfloat16", [2, 3], bf16_bits.tobytes()),
    "f16": ("float32", [8], f16.astype(np.float32).tobytes()),  # exact widening
    "encoder.layers.0.i64": ("int64", [4], i64.tobytes()),
    "mask": ("bool", [4], b.tobytes()),
    "scalar": ("float32", [], scalar.tobytes()),
    "empty": ("float32", [0, 7], b""),
}
check(set(got) == set(want), f"names read by ember: {sorted(got)}")
for name, w in want.items():
    check(got.get(name) == w, f"python -> ember: '{name}' read as {got.get(name)!r:.120}, want {w!r:.120}")

# 2. ember's copy of a Python file is the same file, byte for byte.
py_plain = os.path.join(work, "python_plain.safetensors")
serialize_file(
    {
        "z.weight": raw("F32", f32),
        "a.bias": raw("F32", f32[0]),
        "steps": raw("I64", i64),
        "h": spec("BF16", [6], bf16_bits.tobytes()),
        "mask": raw("BOOL", b),
        "d": raw("F64", f64),
    },
    py_plain,
    metadata={"format": "pt"},
)
em_copy = os.path.join(work, "ember_copy.safetensors")
code, out = run("copy", py_plain, em_copy)
check(code == 0, f"ember copy exit {code}: {out.strip()}")
if code == 0:
    a, c = open(py_plain, "rb").read(), open(em_copy, "rb").read()
    check(a == c, f"ember's copy differs from the Python file ({len(c)} vs {len(a)} bytes)")

# 3. ember writes, Python reads.
em_file = os.path.join(work, "ember_fixed.safetensors")
code, out = run("write", em_file)
check(code == 0, f"ember write exit {code}: {out.strip()}")
expect = {
    "w": ("F32", [3, 4], ((np.arange(12, dtype=np.float32) - 5) / 4).tobytes()),
    "d": ("F64", [5], (np.arange(5, dtype=np.float64) / 3 - 1).tobytes()),
    "b": ("BF16", [2, 3],
          (((np.arange(6, dtype=np.float32) - 3) / 8).view(np.uint32) >> 16).astype(np.uint16).tobytes()),
    "layers.0.i": ("I64", [4], (np.arange(4, dtype=np.int64) * 1000003 - 7).tobytes()),
    "m": ("BOOL", [5], (np.arange(5) % 3 == 0).tobytes()),
    "scalar": ("F32", [], np.array(2.5, dtype=np.float32).tobytes()),
    "empty": ("F32", [0, 3], b""),
}
if code == 0:
    blob = open(em_file, "rb").read()
    seen = {name: (t["dtype"], list(t["shape"]), bytes(t["data"])) for name, t in deserialize(blob)}
    check(set(seen) == set(expect), f"names read by Python: {sorted(seen)}")
    for name, w in expect.items():
        check(seen.get(name) == w, f"ember -> python: '{name}' read as {seen.get(name)!r:.120}, want {w!r:.120}")
    with safe_open(em_file, framework="numpy") as f:
        check(f.metadata() == {"format": "pt", "written_by": 'ember "probe"\n'},
              f"metadata read by Python: {f.metadata()}")
        w = f.get_tensor("w")
        check(w.dtype == np.float32 and w.shape == (3, 4) and (w == (np.arange(12) - 5).reshape(3, 4) / 4).all(),
              "safe_open's numpy view of 'w'")
    n = struct.unpack("<Q", blob[:8])[0]
    check(n % 8 == 0 and blob[8 + n - 1:8 + n] in (b" ", b"}"), f"header size {n} is padded to 8")

# 4. Files both refuse (ember's message is asserted in tests/nn/test_safetensors.cpp).
header = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
bad = {
    "overlap": struct.pack("<Q", len(header)) + header + bytes(8),
    "truncated": open(py_plain, "rb").read()[:-3],
    "non_string_metadata": (lambda h: struct.pack("<Q", len(h)) + h)(b'{"__metadata__":{"n":1}}'),
}
for name, blob in bad.items():
    path = os.path.join(work, f"bad_{name}.safetensors")
    open(path, "wb").write(blob)
    code, out = run("dump", path)
    check(code == 1 and out.startswith("error: safetensors '"), f"ember accepted bad file {name}: {out!r:.200}")
    try:
        deserialize(blob)
        check(False, f"the reference accepted bad file {name}")
    except Exception:
        pass

if failures:
    print(f"FAILED: {len(failures)} check(s) (safetensors {safetensors.__version__})")
    sys.exit(1)
print(f"PASSED: python <-> ember safetensors, bit for bit (safetensors {safetensors.__version__}, numpy {np.__version__})")
