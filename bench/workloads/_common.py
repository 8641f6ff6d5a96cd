"""Shared helpers for the lowtide benchmark workloads.

Every workload prints exactly one JSON line on stdout with at least:
wall_s, peak_rss, rss_after_free, rss_after_200ms, rss_after_decay,
rss_before (bytes). rss_after_200ms and rss_after_decay are sampled
EARLY_S and DECAY_S seconds after finish() took rss_after_free (or, when
the workload passes its own, after finish() was called).
"""
import ctypes
import gc
import json
import os
import sys
import time

MiB = 1024 * 1024
EARLY_S = 0.2   # issue 14: what a process holds 0.2 s after a free
DECAY_S = 1.0   # and 1 s after (past lowtide's 500 ms decay)


def _load_seed_module():
    # The project's one reader of /proc/self/status lives in
    # scripts/workloads/seed.py; load it by path (a plain "import seed" here
    # would find bench/workloads/seed.py instead).
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "workloads", "seed.py")
    spec = importlib.util.spec_from_file_location("lowtide_seed_workload", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


read_status = _load_seed_module().read_status  # (VmRSS, VmHWM) in bytes


def scale(default=1.0):
    """Size multiplier: --scale X on the command line, else BENCH_SCALE."""
    argv = sys.argv[1:]
    if "--scale" in argv:
        return float(argv[argv.index("--scale") + 1])
    return float(os.environ.get("BENCH_SCALE", default))


def allocator():
    pre = os.environ.get("LD_PRELOAD", "")
    try:
        ctypes.CDLL(None).lowtide_version
        return "lowtide"
    except AttributeError:
        pass
    return os.path.basename(pre) if pre else "glibc"


def finish(result, rss_before, wall_s, rss_after_free=None):
    """Fill in the common fields (sampling decay RSS) and print the line."""
    gc.collect()
    rss_now, peak = read_status()
    t0 = time.monotonic()
    if rss_after_free is None:
        rss_after_free = rss_now
    # Sleep to instants measured from t0, so the 1 s sample stays 1 s after
    # the first whatever the 0.2 s one costs.
    time.sleep(max(0.0, EARLY_S - (time.monotonic() - t0)))
    gc.collect()
    rss_early, peak = read_status()
    time.sleep(max(0.0, DECAY_S - (time.monotonic() - t0)))
    gc.collect()
    rss_decay, peak = read_status()
    result.update({
        "allocator": allocator(),
        "wall_s": round(wall_s, 4),
        "rss_before": rss_before,
        "peak_rss": peak,
        "rss_after_free": rss_after_free,
        "rss_after_200ms": rss_early,
        "rss_after_decay": rss_decay,
    })
    print(json.dumps(result))
    sys.stdout.flush()
