#!/usr/bin/python3
"""Small blocks freed by another, live thread (issue 14: memory at every
instant; docs/benchmarks.md "Small blocks freed while their thread lives").
A producer thread makes 500 MiB (* scale) of 64 KiB bytearrays (small
blocks: below every allocator's mmap threshold and lowtide's cutoff) and a
3,000-byte bytearray after every fourth, which it keeps, and hands the big
ones through a queue to a consumer thread, which holds them all, then drops
them and stays alive. The producer goes on working (1,000-byte strings, a
ring of 1,000, 0.5 ms apart) while RSS is sampled right after the drop, 0.2
s and 1 s later: the shape of a pipeline whose stages are threads (a
Python service's worker handing result buffers to a writer thread; Node.js
freeing Buffers on a V8 background thread).

usage: xfree.py [--scale X]
"""
import os
import queue
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

KiB = 1024
MiB = _common.MiB
sc = _common.scale()
SIZE = 64 * KiB
COUNT = max(1, int(500 * MiB * sc) // SIZE)

q = queue.Queue()
dropped = threading.Event()
stop = threading.Event()
keep = []


def consumer():
    held = []
    while True:
        b = q.get()
        if b is None:
            break
        held.append(b)
    held.clear()  # the frees: on this thread, not the producer's
    dropped.set()
    stop.wait()


def producer():
    for i in range(COUNT):
        b = bytearray(SIZE)
        b[::4096] = b"\x01" * len(b[::4096])
        q.put(b)
        del b
        if i % 4 == 3:
            keep.append(bytearray(3000))
    q.put(None)
    junk = []
    while not stop.is_set():
        junk.append(b"x" * 1000)
        junk = junk[-1000:]
        time.sleep(0.0005)


rss_before, _ = _common.read_status()
t0 = time.perf_counter()
threads = [threading.Thread(target=consumer), threading.Thread(target=producer)]
for t in threads:
    t.start()
dropped.wait()
wall = time.perf_counter() - t0
rss_free, _ = _common.read_status()
_common.finish({"workload": "xfree", "blocks": COUNT, "block_bytes": SIZE}, rss_before, wall, rss_free)
stop.set()
for t in threads:
    t.join()
