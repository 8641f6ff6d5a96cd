#!/usr/bin/python3
"""The seed workload: large result buffers built by appends, small objects
kept alive after them, then the buffers dropped.

This is the pattern that made lowtide necessary: a Python service builds
multi-megabyte result buffers (bytearray += chunk) from several threads,
keeps some small bookkeeping objects around, and drops the buffers. With
glibc malloc (and mimalloc 2.0.9, tcmalloc) the freed buffer memory stays
resident because small objects allocated "above" it pin the heap.

Used as a script (scripts/demo, benchmarks) or as a module (tests/memory).
As a script it prints one JSON object on stdout (see run_workload) and, with
--table, a human readable summary on stderr.

Only the standard library is used, so the numbers are not disturbed by
anything else a package might allocate.
"""

import argparse
import ctypes
import gc
import json
import random
import sys
import threading
import time

MiB = 1024 * 1024


def read_status():
    """VmRSS and VmHWM (peak RSS) of this process in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0]) * 1024
    return out["VmRSS"], out["VmHWM"]


def lowtide_loaded():
    """True if liblowtide is loaded in this process (LD_PRELOAD worked)."""
    try:
        ctypes.CDLL(None).lowtide_version
    except AttributeError:
        return False
    return True


def deep_sizeof(obj, seen=None):
    """Bytes held by obj and everything it references (lists, dicts,
    tuples, strings, ints), counted once each via sys.getsizeof."""
    if seen is None:
        seen = set()
    stack = [obj]
    total = 0
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
    return total


def make_keeper(rng, index):
    """Small objects that outlive the buffer built just before them.

    They are sized so they go through malloc, not CPython's pymalloc
    arenas (which mmap on their own): strings over 512 bytes, lists whose
    item array is over 512 bytes, dicts with keys tables over 512 bytes.
    """
    return {
        "index": index,
        "name": "result-%06d-" % index + "n" * rng.randint(600, 1800),
        "offsets": list(range(rng.randint(80, 200))),
        "meta": {"k%03d" % i: i for i in range(rng.randint(40, 90))},
        "tags": ["t" * rng.randint(520, 900) for _ in range(rng.randint(2, 6))],
    }


def run_workload(total_bytes=1200 * 1000 * 1000, threads=4,
                 min_size=int(3.5e6), max_size=int(3.9e6),
                 chunk=64 * 1024, seed=1, rounds=2, settle=0.0):
    """Build ~total_bytes of buffers of min_size..max_size bytes from
    `threads` threads by bytearray += chunk, keep one keeper object per
    buffer, drop the buffers; `rounds` times, like a service handling one
    batch after another. Keepers of every round stay referenced.

    The first round matters less than the later ones: glibc's dynamic mmap
    threshold rises once it frees a large mmapped block, and from then on
    ~3.7 MB blocks come from the heap/arenas, where the keepers pin them.

    Returns a dict with byte counts: rss_before (before the first round),
    rss_built (all buffers of the last round alive), peak (VmHWM),
    rss_after (after the last round's buffers were freed), buffer_bytes
    (per round), kept_bytes (deep getsizeof of all keepers, still
    referenced), buffers (per round), per-round RSS, wall_s, lowtide.
    """
    piece = b"\xa5" * chunk
    keepers = []
    lock = threading.Lock()

    def one_round(rnd):
        rng = random.Random(seed * 7919 + rnd)
        sizes = []
        acc = 0
        while acc < total_bytes:
            s = rng.randint(min_size, max_size)
            sizes.append(s)
            acc += s
        per_thread = [sizes[i::threads] for i in range(threads)]
        buffers = []
        errors = []

        def worker(tid, my_sizes):
            try:
                trng = random.Random(seed * 1000003 + rnd * 1009 + tid)
                for n, size in enumerate(my_sizes):
                    buf = bytearray()
                    while len(buf) + chunk <= size:
                        buf += piece
                    buf += piece[: size - len(buf)]
                    keeper = make_keeper(trng, (rnd * threads + tid) * 100000 + n)
                    with lock:
                        buffers.append(buf)
                        keepers.append(keeper)
            except BaseException as e:  # report, do not hang the caller
                errors.append(repr(e))

        ts = [threading.Thread(target=worker, args=(i, per_thread[i]))
              for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise RuntimeError("workload thread failed: %s" % errors[0])
        rss_built, _ = read_status()
        nbytes = sum(len(b) for b in buffers)
        nbuf = len(buffers)
        buffers.clear()
        del buffers
        gc.collect()
        rss_freed, _ = read_status()
        return {"buffers": nbuf, "buffer_bytes": nbytes,
                "rss_built": rss_built, "rss_after": rss_freed}

    gc.collect()
    rss_before, _ = read_status()
    t0 = time.monotonic()
    per_round = [one_round(r) for r in range(rounds)]
    rss_early = None
    if settle:
        # One reading 0.2 s after the free too: where allocators with a
        # decay period (lowtide's cache, jemalloc's dirty pages) stand then.
        early = min(0.2, settle)
        time.sleep(early)
        rss_early, _ = read_status()
        time.sleep(settle - early)
        gc.collect()
    t1 = time.monotonic()
    rss_after, peak = read_status()
    kept_bytes = deep_sizeof(keepers)
    last = per_round[-1]
    result = {
        "lowtide": lowtide_loaded(),
        "rounds": rounds,
        "buffers": last["buffers"],
        "buffer_bytes": last["buffer_bytes"],
        "kept_objects": len(keepers),
        "kept_bytes": kept_bytes,
        "rss_before": rss_before,
        "rss_built": last["rss_built"],
        "peak": peak,
        "rss_after": rss_after,
        "rss_after_0_2s": rss_early,
        "per_round": per_round,
        "wall_s": round(t1 - t0, 3),
        "settle_s": settle,
    }
    # keepers were alive through the measurement; now they may go
    del keepers
    return result


def format_table(rows):
    """rows: list of (label, result dict). Returns a text table in MiB."""
    def mib(v):
        return "%9.1f" % (v / MiB)
    cols = [
        ("allocator", lambda r: ""),
        ("RSS before", lambda r: mib(r["rss_before"])),
        ("peak", lambda r: mib(r["peak"])),
        ("after free", lambda r: mib(r["rss_after"])),
        ("kept objs", lambda r: mib(r["kept_bytes"])),
        ("wall s", lambda r: "%9.2f" % r["wall_s"]),
    ]
    lines = ["%-12s" % "" + "".join("%12s" % c[0] for c in cols[1:]) + "   (MiB)"]
    for label, r in rows:
        lines.append("%-12s" % label + "".join("%12s" % c[1](r).strip() for c in cols[1:]))
    return "\n".join(lines)


def parse_size(text):
    text = text.strip().upper()
    for suffix, mult in (("GB", 1000 ** 3), ("MB", 1000 ** 2), ("KB", 1000),
                         ("G", 1024 ** 3), ("M", MiB), ("K", 1024)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * mult)
    return int(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--total", default="1200MB", help="bytes of buffers (e.g. 1200MB, 1G)")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--min-size", default="3.5MB")
    ap.add_argument("--max-size", default="3.9MB")
    ap.add_argument("--chunk", default="64K", help="append size")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2,
                    help="build/drop cycles; RSS after the last one is reported")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to wait after the free before measuring")
    ap.add_argument("--require-lowtide", action="store_true",
                    help="exit 2 unless liblowtide is loaded")
    ap.add_argument("--table", action="store_true", help="also print a table on stderr")
    ap.add_argument("--report", metavar="PATH",
                    help="after measuring, write lowtide's text report to PATH "
                         "(lowtide_write_report) if lowtide is loaded")
    a = ap.parse_args(argv)
    if a.require_lowtide and not lowtide_loaded():
        print("seed.py: liblowtide is not loaded (LD_PRELOAD=%s)"
              % (__import__("os").environ.get("LD_PRELOAD", "")), file=sys.stderr)
        return 2
    r = run_workload(total_bytes=parse_size(a.total), threads=a.threads,
                     min_size=parse_size(a.min_size), max_size=parse_size(a.max_size),
                     chunk=parse_size(a.chunk), seed=a.seed, rounds=a.rounds,
                     settle=a.settle)
    print(json.dumps(r))
    sys.stdout.flush()
    if a.report and r["lowtide"]:
        fn = getattr(ctypes.CDLL(None), "lowtide_write_report", None)
        if fn is not None:
            fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
            if fn(a.report.encode(), 1) != 0:
                print("seed.py: lowtide_write_report failed", file=sys.stderr)
    if a.table:
        print(format_table([("lowtide" if r["lowtide"] else "this", r)]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
