#!/usr/bin/python3
"""Mid-size blocks, between 64 KiB and 1 MiB: the sizes that sit below
lowtide's cutoff and so live in mimalloc. 4 worker threads (a pool that stays
alive and idle afterwards, as a server's would) each build 100 MiB (* scale)
of bytearrays of random sizes in [64 KiB, 1 MiB), touch them, keep a small
object per block, then drop the blocks and go idle; the main thread measures
RSS right after and 1 s later. Then each thread churns: allocate, touch and
free mid-size temporaries, 2,000 (* scale) per thread, for the timing.

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
built = threading.Barrier(THREADS + 1)
dropped = threading.Barrier(THREADS + 1)
go_churn = threading.Event()
churned = threading.Barrier(THREADS + 1)


def worker(i):
    rng = random.Random(1234 + i)
    total = 0
    while total < per_thread:
        n = rng.randrange(64 * KiB, MiB)
        b = bytearray(n)
        b[::4096] = b"\x01" * len(b[::4096])
        hold[i].append(b)
        keep[i].append(("k%d" % total) * 40)
        total += n
    built.wait()
    hold[i].clear()
    dropped.wait()
    go_churn.wait()
    for _ in range(churn_n):
        n = rng.randrange(64 * KiB, MiB)
        b = bytearray(n)
        b[::4096] = b"\x02" * len(b[::4096])
        del b
    churned.wait()


threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
rss_before, _ = _common.read_status()
t0 = time.perf_counter()
for t in threads:
    t.start()
built.wait()
dropped.wait()
wall_build = time.perf_counter() - t0
# The workers are alive and idle now: what a quiet thread pool holds.
time.sleep(0.05)
rss_after_free, _ = _common.read_status()
time.sleep(_common.DECAY_S)
rss_idle, _ = _common.read_status()
t1 = time.perf_counter()
go_churn.set()
churned.wait()
wall_churn = time.perf_counter() - t1
for t in threads:
    t.join()
_common.finish({"workload": "midsize", "bytes_per_thread": per_thread, "rss_idle_pool": rss_idle,
                "wall_build_s": round(wall_build, 4), "wall_churn_s": round(wall_churn, 4)},
               rss_before, wall_build + wall_churn, rss_after_free)
