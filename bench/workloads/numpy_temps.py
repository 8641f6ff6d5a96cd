#!/usr/bin/python3
"""Large temporaries in a loop: c = a * 2.0 + b for arrays of
1, 2, 8, 32, 128 MiB; each size runs enough iterations to move about
PER_SIZE bytes of (result) temporaries (2 GiB * scale; each iteration
makes two temporaries: a*2.0 and the sum).

usage: numpy_temps.py [--scale X]
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import numpy as np  # noqa: E402

MiB = _common.MiB
sc = _common.scale()
per_size = int(2048 * MiB * sc)
sizes_mib = [1, 2, 8, 32, 128]

rss_before, _ = _common.read_status()
per = {}
t0 = time.perf_counter()
for s in sizes_mib:
    n = s * MiB // 8
    a = np.ones(n)
    b = np.ones(n)
    iters = max(1, per_size // (s * MiB))
    ts = time.perf_counter()
    for _ in range(iters):
        c = a * 2.0 + b
        del c
    per["%dMiB" % s] = {"iters": iters, "s": round(time.perf_counter() - ts, 4)}
    del a, b
wall = time.perf_counter() - t0
_common.finish({"workload": "numpy-temps", "per_size_bytes": per_size, "per_size": per},
               rss_before, wall)
