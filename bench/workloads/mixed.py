#!/usr/bin/python3
"""Small-object throughput: runs bench/mixed.py (read-only reuse) in this
process and records its wall time (it prints its own; ours is the same
measurement taken around it)."""
import contextlib
import io
import os
import runpy
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

rss_before, _ = _common.read_status()
buf = io.StringIO()
t0 = time.perf_counter()
with contextlib.redirect_stdout(buf):
    runpy.run_path(os.path.join(HERE, "..", "mixed.py"), run_name="__main__")
wall = time.perf_counter() - t0
try:
    own = float(buf.getvalue().strip().splitlines()[-1])
except (ValueError, IndexError):
    own = None
_common.finish({"workload": "mixed", "mixed_reported_s": own}, rss_before, wall)
