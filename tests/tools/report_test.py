"""`lowtide report` merges per-process JSON reports:

  report_test.py LAUNCHER LIB

A Python parent under lowtide starts two children (one forked, one exec'd)
that each allocate their own number of large blocks; every process writes
its report through %p, with call sites on (every block captured). The
merged totals must equal the sums (and maxima) the test computes from the
files itself, and so must the call sites merged across processes: the
parent and the forked child run the same code, so their sites share
stacks."""
import glob
import json
import os
import sys
import tempfile

from tools_common import check, clean_env, finish, run

launcher, lib = sys.argv[1], sys.argv[2]


def stack_key(site):
    return (tuple((f["module"], f["offset"]) for f in site["frames"]),
            tuple((p["file"], p["line"], p["function"]) for p in site["python"]))


MiB = 1 << 20

FAMILY = r"""
import os, subprocess, sys
def work(n):
    bufs = [bytearray(2 << 20) for _ in range(n)]
    del bufs
work(3)
pid = os.fork()
if pid == 0:
    work(5)
    os._exit(0)
os.waitpid(pid, 0)
subprocess.run([sys.executable, "-c", "bufs = [bytearray(4 << 20) for _ in range(7)]"], check=True)
"""

with tempfile.TemporaryDirectory(prefix="lowtide-report-") as tmp:
    env = clean_env(LD_PRELOAD=lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=os.path.join(tmp, "r.%p.json"),
                    LOWTIDE_SITES="8", LOWTIDE_SITE_SAMPLE="0")
    rc, out, err = run(["/usr/bin/python3", "-c", FAMILY], env)
    check(rc == 0, "family ran: rc %d %s" % (rc, err))
    files = sorted(glob.glob(os.path.join(tmp, "r.*.json")))
    check(len(files) == 3, "three reports (parent, forked, exec'd child): %s" % files)
    reps = [json.load(open(f)) for f in files]

    rc, out, err = run([launcher, "report", "--json"] + files, clean_env())
    check(rc == 0 and err == "", "report --json rc %d %r" % (rc, err))
    merged = json.loads(out)
    rows, total = merged["processes"], merged["total"]
    check(sorted(r["pid"] for r in rows) == sorted(r["pid"] for r in reps), "one row per process")
    check(total["processes"] == 3, "total.processes 3")
    for key, get in [("calls_malloc", lambda r: r["totals"]["calls"]["malloc"]),
                     ("calls_free", lambda r: r["totals"]["calls"]["free"]),
                     ("small_out", lambda r: r["totals"]["small"]["out"]),
                     ("large_requested", lambda r: r["totals"]["large"]["requested"]),
                     ("large_out", lambda r: r["totals"]["large"]["out"]),
                     ("large_freed", lambda r: r["totals"]["large"]["freed"]),
                     ("large_maps", lambda r: r["large"]["maps"]),
                     ("large_returned_bytes", lambda r: r["large"]["returned_bytes"]),
                     ("large_cached_bytes", lambda r: r["large"]["cached_bytes"]),
                     ("rss", lambda r: r["process"]["rss"]),
                     ("threads", lambda r: len(r["threads"])),
                     ("peak_rss_sum", lambda r: r["process"]["peak_rss"]),
                     ("large_peak_live_sum", lambda r: r["large"]["peak_live"])]:
        check(total[key] == sum(get(r) for r in reps), "total %s is the sum over files" % key)
    check(total["peak_rss_max"] == max(r["process"]["peak_rss"] for r in reps), "peak_rss_max is the max")
    check(total["large_peak_live_max"] == max(r["large"]["peak_live"] for r in reps), "large peak max")
    # The forked child's counters include the parent's before the fork
    # (docs/report.md); the exec'd child starts from zero: 3 + (3 + 5) + 7.
    check(total["large_maps"] >= 18, "large blocks of all three processes: %d" % total["large_maps"])
    check(total["large_requested"] >= (3 * 2 + 8 * 2 + 7 * 4) * MiB, "large bytes of all three")


    # Call sites, merged by stack (module and offset of every frame, and the
    # Python frames: work(3) and work(5) are two sites).
    by_stack = {}
    for r in reps:
        check(r["sites"]["enabled"], "call sites on in pid %d" % r["pid"])
        for site in r["sites"]["top"]:
            by_stack.setdefault(stack_key(site), []).append(site)
    merged_sites = total["sites"]
    check(len(merged_sites) == len(by_stack), "one merged site per distinct stack: %d vs %d"
          % (len(merged_sites), len(by_stack)))
    for m in merged_sites:
        parts = by_stack.get(stack_key(m), [])
        check(m["processes"] == len(parts), "a merged site counts the processes that listed it")
        for k in ("blocks", "bytes", "live_bytes", "remaps"):
            check(m[k] == sum(p[k] for p in parts), "merged site %s is the sum over files" % k)
        check(m["peak_live_bytes_max"] == max(p["peak_live_bytes"] for p in parts), "merged site peak max")
    check(any(m["processes"] >= 2 for m in merged_sites), "the parent's and the forked child's sites merged")
    check(sum(m["bytes"] for m in merged_sites) >= (3 * 2 + 8 * 2 + 7 * 4) * MiB,
          "the merged sites hold every process's large bytes")

    rc, text, err = run([launcher, "report"] + files, clean_env())
    check("large-allocation sites over all processes" in text and "#1 " in text, "the text lists merged sites")
    check(rc == 0 and "total over 3 processes" in text and all(str(r["pid"]) in text for r in reps),
          "text summary names every pid and the total")
    check("max " in text and "sum " in text, "text says which peaks are max and which are sums")

    # A LOWTIDE_STATS=both file (text, then the JSON) is read too.
    both = os.path.join(tmp, "both.txt")
    env = clean_env(LD_PRELOAD=lib, LOWTIDE_STATS="both", LOWTIDE_STATS_FILE=both)
    run(["/usr/bin/python3", "-c", "b = bytearray(3 << 20)"], env)
    rc, out, err = run([launcher, "report", "--json", both], clean_env())
    check(rc == 0 and json.loads(out)["total"]["large_maps"] >= 1, "reads a 'both' report: %r" % err)
    # The text part shows the command line raw: a line of it that starts
    # like the JSON object is not where the JSON starts (before: "not
    # valid JSON").
    run(["/usr/bin/python3", "-c", 'x = """\n{"schema": "lowtide-report"}"""\nb = bytearray(3 << 20)'], env)
    rc, out, err = run([launcher, "report", "--json", both], clean_env())
    check(rc == 0 and json.loads(out)["total"]["large_maps"] >= 1,
          "reads a 'both' report whose command has a line like the JSON's first: %r" % err)

    # Files that are not reports: named on stderr, exit 1, the rest merged.
    junk = os.path.join(tmp, "junk.json")
    with open(junk, "w") as f:
        f.write('{"schema": "something-else"}')
    rc, out, err = run([launcher, "report", "--json", files[0], junk, os.path.join(tmp, "missing.json")],
                       clean_env())
    check(rc == 1 and "junk.json: not a lowtide report" in err and "missing.json" in err,
          "bad files named: rc %d %r" % (rc, err))
    check(json.loads(out)["total"]["processes"] == 1, "the good file still merged")
    rc, out, err = run([launcher, "report", junk], clean_env())
    check(rc == 1 and "no usable report" in err, "only bad files: rc %d" % rc)

    # JSON nested deeper than Python's recursion limit (a damaged or crafted
    # file): named like any other bad file (before: a RecursionError traceback).
    deep = os.path.join(tmp, "deep.json")
    with open(deep, "w") as f:
        f.write('{"schema": "lowtide-report", "schema_version": 1, "x": ' + "[" * 100000 + "]" * 100000 + "}")
    for args in (["report", files[0], deep], ["report", "--collapsed", os.path.join(tmp, "c.txt"), files[0], deep]):
        rc, out, err = run([launcher] + args, clean_env())
        check(rc == 1 and "Traceback" not in err and "deep.json: not valid JSON" in err
              and "total over 1 process" in out, "%s: deep.json named, the rest merged: rc %d %r"
              % (args[:2], rc, err[-300:]))

finish()
