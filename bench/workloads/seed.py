#!/usr/bin/python3
"""Seed scenario: ~3.7 MB result buffers built by bytearray appends from
N threads, small keeper objects allocated above them, buffers dropped.
Wraps scripts/workloads/seed.py (read-only reuse).

usage: seed.py --threads N [--scale X]   (total = 1200 MB * X per round, 2 rounds)
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "workloads"))
import _common  # noqa: E402
import seed as seedmod  # noqa: E402  (scripts/workloads/seed.py)

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--scale", type=float, default=None)
ap.add_argument("--rounds", type=int, default=2)
a = ap.parse_args()
sc = a.scale if a.scale is not None else _common.scale()
total = int(1200e6 * sc)
r = seedmod.run_workload(total_bytes=total, threads=a.threads, rounds=a.rounds)
out = {"workload": "seed-%dt" % a.threads, "total_bytes": total, "rounds": a.rounds,
       "buffers": r["buffers"], "kept_bytes": r["kept_bytes"], "rss_built": r["rss_built"]}
_common.finish(out, r["rss_before"], r["wall_s"], rss_after_free=r["rss_after"])
