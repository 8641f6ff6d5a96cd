#!/usr/bin/python3
"""lowtide in Dask distributed's worker processes.

A LocalCluster with separate worker processes, each started under lowtide
through its environment (the same way you would set LD_PRELOAD for Spark
executors or Ray workers, see docs/distributed.md). Tasks build large numpy
results that stay on the workers until the client lets them go; each worker
writes a JSON report at exit (LOWTIDE_STATS_FILE with %p), and
`lowtide report` merges them.

    examples/dask_demo.py [--out DIR] [--workers 2] [--tasks 16] [--mib 16]

Prints per-worker RSS while the results are held and after they are
dropped, then the merged report. Writes DIR/demo.json (what the test reads).
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_LAUNCHER = os.path.join(os.path.dirname(HERE), "scripts", "lowtide")
SOURCE_PYTHON = os.path.join(os.path.dirname(HERE), "python")
MiB = 1 << 20


def launcher():
    if os.path.exists(SOURCE_LAUNCHER):
        return SOURCE_LAUNCHER
    found = shutil.which("lowtide")
    if not found:
        sys.exit("dask_demo: no `lowtide` command (run from the source tree or install lowtide)")
    return found


# --- functions that run on the workers ------------------------------------

def build_result(i, mib):
    """A large task result (touched, so resident), kept on the worker."""
    import numpy as np
    return np.full(mib * MiB // 8, float(i))


def checksum(a):
    return float(a[0]) * a.size


def stored_results():
    from distributed import get_worker
    return len(get_worker().data)


def worker_state():
    """pid, whether liblowtide.so is mapped, RSS, and lowtide's own counters
    through the Python helper (python/lowtide.py)."""
    import lowtide
    with open("/proc/self/maps") as f:
        mapped = any("liblowtide" in line for line in f)
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    st = lowtide.stats() if lowtide.active() else {}
    return {"pid": os.getpid(), "mapped": mapped, "active": lowtide.active(), "rss": rss,
            "large_live": st.get("large_live"), "large_maps": st.get("large_maps")}


# --- the driver ------------------------------------------------------------

def put_workers_under_lowtide(lib, out):
    """Worker processes are spawned (a fresh python3 exec'd by the nanny)
    with this process's environment, so they start under lowtide. This
    process itself is already running and stays on glibc."""
    old = os.environ.get("LD_PRELOAD")
    os.environ["LD_PRELOAD"] = lib + (":" + old if old else "")
    os.environ["LOWTIDE_STATS"] = "json"
    # A pattern: the directory's own "%" doubled, or lowtide would expand it.
    os.environ["LOWTIDE_STATS_FILE"] = os.path.join(out.replace("%", "%%"), "dask.%p.json")
    os.environ.pop("LOWTIDE_OWNER_PID", None)
    # The workers import the helper from the source tree when run from it.
    if os.path.isdir(SOURCE_PYTHON):
        os.environ["PYTHONPATH"] = SOURCE_PYTHON + (":" + os.environ["PYTHONPATH"]
                                                    if os.environ.get("PYTHONPATH") else "")
        sys.path.insert(0, SOURCE_PYTHON)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="lowtide-dask", help="directory for the reports (default: %(default)s)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=16, help="large results built in all")
    ap.add_argument("--mib", type=int, default=16, help="size of one result, MiB")
    a = ap.parse_args()

    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(os.path.join(glob.escape(out), "dask.*.json")):
        os.remove(old)
    lt = launcher()
    lib = subprocess.run([lt, "lib"], stdout=subprocess.PIPE, check=True, text=True).stdout.strip()
    plain_env = dict(os.environ)        # for the `lowtide report` runs below
    put_workers_under_lowtide(lib, out)

    from dask.distributed import Client, LocalCluster

    t0 = time.monotonic()
    cluster = LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                           dashboard_address=None, scheduler_port=0)
    client = Client(cluster)
    try:
        start = client.run(worker_state)
        futures = client.map(build_result, range(a.tasks), mib=a.mib)
        sums = client.gather(client.map(checksum, futures))
        held = client.run(worker_state)
        del futures                      # the workers drop the results
        deadline = time.monotonic() + 30
        while any(client.run(stored_results).values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)                  # past lowtide's 500 ms decay of the reuse cache
        dropped = client.run(worker_state)
    finally:
        # A graceful close: each nanny asks its worker to close and the
        # worker process exits normally, which writes lowtide's report.
        client.close()
        cluster.close()
    elapsed = time.monotonic() - t0

    workers = sorted(held)
    print("%d workers under lowtide, %d results of %d MiB (checksum %.0f), %.1f s"
          % (len(workers), a.tasks, a.mib, sum(sums), elapsed))
    print("%-28s %7s %7s %14s %14s %14s" % ("worker", "pid", "mapped", "RSS start MiB", "RSS held MiB",
                                            "RSS dropped MiB"))
    for w in workers:
        print("%-28s %7d %7s %14.1f %14.1f %14.1f" % (w, held[w]["pid"], held[w]["mapped"], start[w]["rss"] / MiB,
                                                     held[w]["rss"] / MiB, dropped[w]["rss"] / MiB))

    worker_pids = [held[w]["pid"] for w in workers]
    reports = [os.path.join(out, "dask.%d.json" % pid) for pid in worker_pids]
    missing = [r for r in reports if not os.path.exists(r)]
    others = sorted(set(glob.glob(os.path.join(glob.escape(out), "dask.*.json"))) - set(reports))
    if others:
        print("\nreports of other processes started with the same environment (not workers): %s"
              % ", ".join(os.path.basename(o) for o in others))
    if missing:
        print("\nmissing worker reports: %s" % ", ".join(missing))
    present = [r for r in reports if os.path.exists(r)]
    merged = None
    if present:
        print("\n== lowtide report %s ==" % " ".join(os.path.relpath(r) for r in present), flush=True)
        subprocess.run([lt, "report"] + present, check=False, env=plain_env)
        merged = json.loads(subprocess.run([lt, "report", "--json"] + present, stdout=subprocess.PIPE,
                                           check=True, text=True, env=plain_env).stdout)
    with open(os.path.join(out, "demo.json"), "w") as f:
        json.dump({"workers": {w: {"start": start[w], "held": held[w], "dropped": dropped[w]} for w in workers},
                   "worker_reports": reports, "other_reports": others, "missing": missing,
                   "tasks": a.tasks, "mib": a.mib, "merged": merged}, f, indent=1)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
