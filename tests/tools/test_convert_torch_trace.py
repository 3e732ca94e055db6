#!/usr/bin/env python3
"""tools/convert_torch_trace.py against a hand-made PyTorch-style snapshot
(tests/data/torch/snapshot_small.json) whose expected CSV is committed
(tests/data/traces/torch_snapshot_small.csv, checked by hand: the block freed
without an alloc comes first, snapshot/oom/segment_map events are dropped and
counted), the same snapshot as a pickle, and every malformed input named."""

import copy
import io
import json
import os
import pickle
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import convert_torch_trace as ct  # noqa: E402

FIXTURE = os.path.join(ROOT, "tests", "data", "torch", "snapshot_small.json")
EXPECTED = os.path.join(ROOT, "tests", "data", "traces", "torch_snapshot_small.csv")


def load_fixture():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


def csv_of(snapshot, device=None):
    rows, meta = ct.convert(snapshot, device)
    out = io.StringIO()
    ct.write_csv(rows, meta, out)
    return out.getvalue()


def error_of(snapshot, device=None):
    try:
        ct.convert(snapshot, device)
    except ct.ConvertError as e:
        return str(e)
    return "(no error)"


class ConvertTest(unittest.TestCase):
    def setUp(self):
        with open(EXPECTED, encoding="utf-8") as f:
            self.expected = f.read()

    def test_json_fixture_gives_the_committed_csv(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "t.csv")
            self.assertEqual(ct.main([FIXTURE, "-o", out]), 0)
            with open(out, encoding="utf-8") as f:
                self.assertEqual(f.read(), self.expected)

    def test_pickle_gives_the_same_csv(self):
        with tempfile.TemporaryDirectory() as d:
            pkl = os.path.join(d, "snapshot.pickle")
            with open(pkl, "wb") as f:
                pickle.dump(load_fixture(), f)
            out = os.path.join(d, "t.csv")
            self.assertEqual(ct.main([pkl, "-o", out]), 0)
            with open(out, encoding="utf-8") as f:
                self.assertEqual(f.read(), self.expected)

    def test_rows_and_metadata(self):
        rows, meta = ct.convert(load_fixture())
        self.assertEqual(rows[0], ("alloc", 0x7F00005F4000, 2000, 0))  # the prelude
        self.assertEqual(len(rows), 14)
        self.assertNotIn("snapshot", [r[0] for r in rows])
        meta = dict(meta)
        self.assertEqual(meta["prelude_allocs"], "1")
        self.assertEqual(meta["dropped_oom"], "1")
        self.assertEqual(meta["dropped_segment_map"], "1")
        self.assertEqual(meta["dropped_snapshot"], "1")

    def test_extra_metadata_and_bad_metadata(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "t.csv")
            self.assertEqual(ct.main([FIXTURE, "-o", out, "--meta", "torch_max_memory_reserved=123"]), 0)
            with open(out, encoding="utf-8") as f:
                self.assertIn("# torch_max_memory_reserved: 123\n", f.read())
            err = io.StringIO()
            with redirect_stderr(err):
                self.assertEqual(ct.main([FIXTURE, "-o", out, "--meta", "novalue"]), 1)
            self.assertIn("expected KEY=VALUE", err.getvalue())

    def test_a_block_pending_when_recording_began(self):
        snap = {"device_traces": [[
            {"action": "free_completed", "addr": 4096, "size": 100, "stream": 7},
            {"action": "alloc", "addr": 8192, "size": 5, "stream": 0},
        ]]}
        rows, meta = ct.convert(snap)
        self.assertEqual(rows[:2], [("alloc", 4096, 100, 7), ("free_requested", 4096, 100, 7)])
        self.assertEqual(dict(meta)["prelude_allocs"], "1")

    def test_device_choice(self):
        snap = load_fixture()
        two = {"device_traces": [[], snap["device_traces"][0]]}
        self.assertIn("device_traces[1]", csv_of(two))
        both = {"device_traces": [snap["device_traces"][0], snap["device_traces"][0]]}
        self.assertIn("devices [0, 1] all have events: choose one with --device", error_of(both))
        self.assertIn("device_traces[1]", csv_of(both, 1))
        self.assertIn("--device 2: the snapshot has traces for 2 device(s)", error_of(both, 2))
        self.assertIn("all empty", error_of({"device_traces": [[], []]}))

    def test_malformed_input_is_named(self):
        def with_event(**changes):
            snap = copy.deepcopy(load_fixture())
            snap["device_traces"][0][1].update(changes)
            return snap
        self.assertIn("event 1: unknown action 'alloca'", error_of(with_event(action="alloca")))
        self.assertIn("event 1 (alloc): 'size' is negative (-5)", error_of(with_event(size=-5)))
        self.assertIn("event 1 (alloc): 'addr' is '0x10', not an integer", error_of(with_event(addr="0x10")))
        self.assertIn("event 1 (alloc): size 4611686018427387905 is above 2^62", error_of(with_event(size=(1 << 62) + 1)))
        snap = copy.deepcopy(load_fixture())
        del snap["device_traces"][0][1]["stream"]
        self.assertIn("event 1 (alloc): 'stream' is None", error_of(snap))
        self.assertIn("no 'device_traces' key", error_of({"segments": []}))
        self.assertIn("not a list", error_of({"device_traces": {}}))
        self.assertIn("event 0: not a dict", error_of({"device_traces": [[5]]}))

    def test_unreadable_files(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.json")
            with open(bad, "w", encoding="utf-8") as f:
                f.write("{not json")
            err = io.StringIO()
            with redirect_stderr(err):
                self.assertEqual(ct.main([bad]), 1)
                self.assertEqual(ct.main([os.path.join(d, "missing.json")]), 1)
            self.assertIn("neither a pickle nor JSON", err.getvalue())
            self.assertIn("No such file", err.getvalue())


if __name__ == "__main__":
    unittest.main(verbosity=1)
