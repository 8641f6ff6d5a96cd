#!/usr/bin/python3
"""Mid-size blocks, between 64 KiB and 1 MiB: around lowtide's cutoff and,
below it, mimalloc's. 4 worker threads, a pool that stays alive: each first
churns (allocate, touch, free) 2,000 (* scale) temporaries of random sizes in
[64 KiB, 1 MiB), then builds and keeps 100 MiB (* scale) of such blocks (and
a small object per block), then drops the blocks and goes idle. RSS is
sampled right after the drop and 1 s later, while the pool is still idle, as
a server's would be between requests.

usage: midsize.py [--scale X]
"""
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

KiB = 1024
MiB = _common.MiB
sc = _common.scale()
THREADS = 4
per_thread = int(100 * MiB * sc)
churn_n = max(1, int(2000 * sc))

hold = [[] for _ in range(THREADS)]
keep = [[] for _ in range(THREADS)]
churned = threading.Barrier(THREADS + 1)
dropped = threading.Barrier(THREADS + 1)
leave = threading.Event()


def block(rng, mark):
    b = bytearray(rng.randrange(64 * KiB, MiB))
    b[::4096] = mark * len(b[::4096])
    return b


def worker(i):
    rng = random.Random(1234 + i)
    for _ in range(churn_n):
        del_me = block(rng, b"\x02")
        del del_me
    churned.wait()
    total = 0
    while total < per_thread:
        b = block(rng, b"\x01")
        hold[i].append(b)
        keep[i].append(("k%d" % total) * 40)
        total += len(b)
    hold[i].clear()
    dropped.wait()
    leave.wait()


threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
rss_before, _ = _common.read_status()
t0 = time.perf_counter()
for t in threads:
    t.start()
churned.wait()
wall_churn = time.perf_counter() - t0
dropped.wait()
wall = time.perf_counter() - t0
time.sleep(0.05)
rss_after_free, _ = _common.read_status()
# finish() samples again 1 s later: the workers are still alive and idle.
_common.finish({"workload": "midsize", "bytes_per_thread": per_thread, "wall_churn_s": round(wall_churn, 4)},
               rss_before, wall, rss_after_free)
leave.set()
for t in threads:
    t.join()
