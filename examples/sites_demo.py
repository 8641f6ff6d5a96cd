#!/usr/bin/python3
"""A process whose memory keeps growing: which code holds it?

    LOWTIDE_SITES=5 LOWTIDE_STATS=text scripts/lowtide run -- /usr/bin/python3 examples/sites_demo.py

Three kinds of large blocks: numpy arrays kept in a cache (what holds the
memory at exit), bytearrays grown by appends and dropped, and numpy
temporaries. docs/report.md shows and explains the report this prints.
"""
import numpy as np

cache = []


def load_frame(i):
    # kept: the growth the report should point at
    return np.ones(40_000 + 1000 * i)


def build_result(n):
    b = bytearray()
    for _ in range(n):
        b += b"x" * 65536
    return len(b)


for i in range(200):
    cache.append(load_frame(i))
    build_result(40)
    t = np.zeros(1 << 20) + 1.0   # two 8 MiB temporaries, dropped
    del t
print("cached", sum(a.nbytes for a in cache) >> 20, "MiB in", len(cache), "arrays", flush=True)
# A normal exit finalizes the interpreter first, which frees the cache: the
# report would find nothing live. Leave the way a killed or os._exit'ing
# worker does, so the exit report (written from _exit) sees what it held.
import os  # noqa: E402
os._exit(0)
