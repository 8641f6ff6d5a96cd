#!/usr/bin/python3
"""Freed large buffers leave RSS under lowtide.

usage: rss_test.py /path/to/scripts/workloads/seed.py
Must run with LD_PRELOAD=liblowtide.so (the meson test sets it).

Under lowtide, in this process: 4 threads build ~1 GB of 1-4 MiB buffers
by `bytearray += 64 KiB chunk`, and after each buffer allocate a keeper
(dict/list/str objects sized to go through malloc, not pymalloc) that stays
referenced, i.e. small objects live "above" the buffers. The buffers are
then dropped (del + gc). This is done twice (a service handles batch after
batch; glibc behaves differently once it has freed one large mmapped
block). Then VmRSS is read from /proc/self/status and

    RSS_after <= RSS_before_workload + kept_bytes + 16 MiB

is asserted, where kept_bytes is the deep sys.getsizeof sum of every keeper
still referenced (measured, printed).

Then, as information only, the same workload runs in a child /usr/bin/python3
WITHOUT LD_PRELOAD (plain glibc malloc) and its numbers are printed beside
lowtide's.
"""

import importlib.util
import json
import os
import subprocess
import sys
import time

MiB = 1024 * 1024
SLACK = 16 * MiB

PARAMS = dict(total_bytes=1000 * MiB, threads=4, min_size=1 * MiB, max_size=4 * MiB,
              chunk=64 * 1024, seed=3, rounds=2,
              # lowtide keeps freed large blocks for reuse up to LOWTIDE_CACHE
              # and returns them after LOWTIDE_DECAY_MS (1 s by default; its
              # helper thread checks every half period): measure after that.
              settle=2.0)


def load_seed(path):
    spec = importlib.util.spec_from_file_location("seed_workload", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_glibc(seed_path):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("LOWTIDE_CUTOFF", None)
    env.pop("MALLOC_PERTURB_", None)  # meson sets it; it would change glibc's behaviour
    cmd = ["/usr/bin/python3", seed_path,
           "--total", str(PARAMS["total_bytes"]), "--threads", str(PARAMS["threads"]),
           "--min-size", str(PARAMS["min_size"]), "--max-size", str(PARAMS["max_size"]),
           "--chunk", str(PARAMS["chunk"]), "--seed", str(PARAMS["seed"]),
           "--rounds", str(PARAMS["rounds"])]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    if p.returncode != 0:
        print("glibc comparison run failed (exit %d), not counted:\n%s"
              % (p.returncode, p.stderr[-2000:]))
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: rss_test.py /path/to/seed.py")
    seed_path = sys.argv[1]
    seed = load_seed(seed_path)

    if not seed.lowtide_loaded():
        print("FAIL: not running under lowtide: lowtide_version is not visible "
              "via ctypes.CDLL(None) (LD_PRELOAD=%r)" % os.environ.get("LD_PRELOAD"))
        return 1

    t0 = time.monotonic()
    r = seed.run_workload(**PARAMS)
    t_lt = time.monotonic() - t0

    t0 = time.monotonic()
    g = run_glibc(seed_path)
    t_g = time.monotonic() - t0

    rows = [("lowtide", r)]
    if g is not None:
        if g.get("lowtide"):
            print("warning: the comparison run still had lowtide loaded")
        rows.append(("glibc", g))
    print("workload: %d rounds x %d buffers (%.0f MiB) of %d-%d MiB by %d KiB appends, %d threads"
          % (PARAMS["rounds"], r["buffers"], r["buffer_bytes"] / MiB, PARAMS["min_size"] // MiB,
             PARAMS["max_size"] // MiB, PARAMS["chunk"] // 1024, PARAMS["threads"]))
    print(seed.format_table(rows))
    for label, x in rows:
        print("%-8s per round (built -> freed, MiB): %s" % (label, "; ".join(
            "%.0f -> %.0f" % (pr["rss_built"] / MiB, pr["rss_after"] / MiB)
            for pr in x["per_round"])))
    print("wall: lowtide run %.1f s, glibc run %.1f s" % (t_lt, t_g))

    limit = r["rss_before"] + r["kept_bytes"] + SLACK
    print("\nassert RSS_after %.1f MiB <= RSS_before %.1f + kept %.1f + slack %.0f = %.1f MiB"
          % (r["rss_after"] / MiB, r["rss_before"] / MiB, r["kept_bytes"] / MiB,
             SLACK / MiB, limit / MiB))
    if r["rss_after"] > limit:
        print("FAIL: %.1f MiB more resident after the free than allowed"
              % ((r["rss_after"] - limit) / MiB))
        return 1
    if r["buffer_bytes"] < 900 * MiB:
        print("FAIL: workload built only %.0f MiB" % (r["buffer_bytes"] / MiB))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
