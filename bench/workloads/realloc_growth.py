#!/usr/bin/python3
"""realloc growth: a bytearray grown by 64 KiB appends up to 256 MiB
(* scale), 4 times; each buffer is dropped before the next.

usage: realloc_growth.py [--scale X]
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

MiB = _common.MiB
sc = _common.scale()
target = int(256 * MiB * sc)
piece = b"\x5a" * (64 * 1024)

rss_before, _ = _common.read_status()
t0 = time.perf_counter()
for _ in range(4):
    buf = bytearray()
    while len(buf) < target:
        buf += piece
    del buf
wall = time.perf_counter() - t0
_common.finish({"workload": "realloc-growth", "target_bytes": target}, rss_before, wall)
