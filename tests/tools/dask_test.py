"""examples/dask_demo.py: a Dask LocalCluster whose worker processes run
under lowtide, each writing its JSON report at a graceful shutdown.

  dask_test.py DEMO BUILD_DIR

Checks: at least two workers, each with liblowtide.so mapped and the helper
active in it; every worker's report exists, from its own pid, and shows the
large results it built; `lowtide report` (in the demo's output) totals are
the sums of the worker reports."""
import glob
import json
import os
import sys
import tempfile

from tools_common import check, clean_env, finish, run

demo, build = sys.argv[1], os.path.abspath(sys.argv[2])
MiB = 1 << 20
TASKS, SIZE = 8, 8

with tempfile.TemporaryDirectory(prefix="lowtide-dask-") as tmp:
    # A directory name with "%" (LOWTIDE_STATS_FILE's pattern character)
    # and "[" (glob's): before, the workers' reports went elsewhere.
    out = os.path.join(tmp, "dask%p[1]")
    env = clean_env(LOWTIDE_BUILD_DIR=build)
    rc, stdout, err = run(["/usr/bin/python3", demo, "--out", out, "--workers", "2", "--tasks", str(TASKS),
                           "--mib", str(SIZE)], env, timeout=90, cwd=tmp)
    print(stdout)
    check(rc == 0, "demo rc %d: %s" % (rc, err[-3000:]))
    with open(os.path.join(out, "demo.json")) as f:
        d = json.load(f)
    workers = d["workers"]
    pids = [w["held"]["pid"] for w in workers.values()]
    check(len(workers) >= 2 and len(set(pids)) == len(pids), "two workers, distinct pids: %s" % pids)
    check(os.getpid() not in pids, "workers are separate processes")
    for name, w in workers.items():
        check(w["held"]["mapped"] and w["held"]["active"], "%s: liblowtide.so mapped, helper active" % name)
    check(d["missing"] == [], "every worker wrote its report: missing %s" % d["missing"])

    reps = []
    for pid, path in zip(pids, d["worker_reports"]):
        if not os.path.exists(path):
            continue
        with open(path) as f:
            r = json.load(f)
        reps.append(r)
        check(r["pid"] == pid and "multiprocessing" in r["command"], "report %s is worker %d's" % (path, pid))
        check(r["partial"] is False, "%d: report not partial" % pid)
    # Each result is one SIZE MiB numpy array on the large path; together
    # the workers built all TASKS of them (a worker may build all of them).
    check(sum(r["large"]["maps"] for r in reps) >= TASKS, "large blocks >= %d in all" % TASKS)
    check(sum(r["totals"]["large"]["requested"] for r in reps) >= TASKS * SIZE * MiB,
          "large bytes requested >= %d MiB in all" % (TASKS * SIZE))

    m = d["merged"]
    check(m is not None and m["total"]["processes"] == len(reps), "lowtide report merged every worker report")
    if m:
        t = m["total"]
        for key, get in [("large_maps", lambda r: r["large"]["maps"]),
                         ("large_out", lambda r: r["totals"]["large"]["out"]),
                         ("calls_malloc", lambda r: r["totals"]["calls"]["malloc"]),
                         ("calls_free", lambda r: r["totals"]["calls"]["free"]),
                         ("large_returned_bytes", lambda r: r["large"]["returned_bytes"]),
                         ("peak_rss_sum", lambda r: r["process"]["peak_rss"])]:
            check(t[key] == sum(get(r) for r in reps), "merged %s is the sum of the worker reports" % key)
    check("total over %d processes" % len(reps) in stdout, "the demo prints the merged summary")

finish()
