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
import re
import stat
import subprocess
import sys
import tempfile
import threading

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
                     ("small_trims", lambda r: r["small"]["trims"]),
                     ("small_trim_dropped", lambda r: r["small"]["trim_dropped"]),
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

    # A report of the right schema with a field of the wrong type (a
    # hand-made file): named on stderr with the field, skipped (or, for its
    # call sites, its sites left out), the rest merged; no traceback (before:
    # a TypeError or ValueError traceback in the merge or the summary).
    with open(files[0]) as f:
        good = json.load(f)

    def merged_processes(args, out):
        if "--json" in args:
            try:
                return json.loads(out)["total"]["processes"]
            except ValueError:
                return None
        m = re.search(r"total over (\d+) process", out)
        return int(m.group(1)) if m else None

    site0 = "sites.top[0]."
    bad_cases = [("pid", lambda r: r.update(pid="x"), "field pid is 'x', not a whole number"),
                 ("command", lambda r: r.update(command=5), "field command is 5, not a string"),
                 ("peak_rss", lambda r: r["process"].update(peak_rss="9"), "field process.peak_rss is '9'"),
                 ("maps", lambda r: r["large"].update(maps=1.5), "field large.maps is 1.5, not a whole number"),
                 ("calls", lambda r: r["totals"]["calls"].update(free=None), "field totals.calls.free is None"),
                 ("huge", lambda r: r["process"].update(rss=10 ** 400), "field process.rss is 1000"),
                 ("sites", lambda r: r.update(sites="x"), "field sites is 'x', not an object"),
                 ("offset", lambda r: r["sites"]["top"][0]["frames"][0].update(offset="0x10"),
                  "field %sframes[0].offset is '0x10'" % site0),
                 ("line", lambda r: r["sites"]["top"][0].update(python=[{"file": "f.py", "line": "1",
                                                                         "function": "f"}]),
                  "field %spython[0].line is '1'" % site0),
                 ("bytes", lambda r: r["sites"]["top"][0].update(bytes="x"), "field %sbytes is 'x'" % site0),
                 ("trims", lambda r: r["small"].update(trims="3"), "field small.trims is '3', not a whole number")]
    for name, spoil, said in bad_cases:
        r = json.loads(json.dumps(good))
        r["pid"] = good["pid"] + 1  # not a pid the summary warns is in two files
        spoil(r)
        bad = os.path.join(tmp, "bad-%s.json" % name)
        with open(bad, "w") as f:
            json.dump(r, f)
        # A report whose call sites are malformed keeps its row.
        rows_kept = 2 if name in ("sites", "offset", "line", "bytes") else 1
        for args in (["report"], ["report", "--json"], ["report", "--collapsed", os.path.join(tmp, "b.txt")]):
            rc, out, err = run([launcher] + args + [files[0], bad], clean_env())
            check(rc == 1 and "Traceback" not in err and ("bad-%s.json: %s" % (name, said)) in err
                  and len(err.strip().splitlines()) == 1 and merged_processes(args, out) == rows_kept,
                  "%s, %s: named in one line, the rest merged: rc %d %r" % (name, args[1:2], rc, err[-400:]))
    # A report of lowtide before the "small" object (none in it): merged,
    # its trims counted as none.
    old = json.loads(json.dumps(good))
    old["pid"] = good["pid"] + 2
    del old["small"]
    older = os.path.join(tmp, "older.json")
    with open(older, "w") as f:
        json.dump(old, f)
    rc, out, err = run([launcher, "report", "--json", files[0], older], clean_env())
    check(rc == 0 and err == "" and json.loads(out)["total"]["small_trims"] == good["small"]["trims"],
          "a report without the small object merged: rc %d %r" % (rc, err[-300:]))
    # An integer of more than Python's 4300 digits: not valid JSON (before:
    # a ValueError traceback).
    digits = os.path.join(tmp, "digits.json")
    with open(digits, "w") as f:
        f.write(json.dumps(good).replace('"pid": %d' % good["pid"], '"pid": ' + "9" * 5000, 1))
    rc, out, err = run([launcher, "report", files[0], digits], clean_env())
    check(rc == 1 and "Traceback" not in err and "digits.json: not valid JSON" in err and "total over 1 process" in out,
          "5000 digits: named, the rest merged: rc %d %r" % (rc, err[-300:]))

    # --flame/--collapsed at a name that is not a new or regular file
    # (docs/security.md's rules, as for the library's reports). Before, the
    # path was opened as given: a link there was written through.
    def collapsed_to(path, *extra):
        return run([launcher, "report", "--collapsed", path] + list(extra) + [files[0]], clean_env())

    outdir = os.path.join(tmp, "out")
    os.mkdir(outdir)
    victim = os.path.join(tmp, "victim.txt")

    def fresh_victim():
        with open(victim, "w") as f:
            f.write("precious\n")

    def victim_kept():
        with open(victim) as f:
            return f.read() == "precious\n"

    # A regular file there: replaced by a new file (renamed over it).
    regular = os.path.join(outdir, "c.txt")
    with open(regular, "w") as f:
        f.write("old\n")
    ino = os.stat(regular).st_ino
    rc, out, err = collapsed_to(regular)
    with open(regular) as f:
        text = f.read()
    check(rc == 0 and text != "old\n" and " " in text and os.stat(regular).st_ino != ino,
          "a regular file replaced by a new one: rc %d %r" % (rc, err))
    # Our own link to a regular file, and a dangling one: not followed.
    fresh_victim()
    link = os.path.join(outdir, "link.txt")
    os.symlink(victim, link)
    rc, out, err = collapsed_to(link)
    check(rc == 1 and victim_kept() and os.path.islink(link) and "Traceback" not in err
          and "cannot write %s: a symlink to a regular file" % link in err and "total over 1 process" in out,
          "a link to a regular file: not written through: rc %d %r" % (rc, err[-300:]))
    dangling = os.path.join(outdir, "dangling.txt")
    os.symlink(os.path.join(tmp, "made-through-link"), dangling)
    rc, out, err = collapsed_to(dangling)
    check(rc == 1 and not os.path.exists(os.path.join(tmp, "made-through-link")) and "a symlink to nothing" in err,
          "a dangling link: nothing made through it: rc %d %r" % (rc, err[-300:]))
    # /dev/stdout (root's link to our stdout, a pipe here) and a FIFO of
    # ours: written, never replaced.
    rc, out, err = run([launcher, "report", "--collapsed", "/dev/stdout", files[0]], clean_env())
    check(rc == 0 and any(line.rpartition(" ")[2].isdigit() and ";" in line for line in out.splitlines())
          and os.path.islink("/dev/stdout"), "--collapsed /dev/stdout: the stacks printed: rc %d %r" % (rc, err))
    fifo = os.path.join(outdir, "fifo")
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()), daemon=True)
    reader.start()
    rc, out, err = collapsed_to(fifo)
    reader.join(60)
    check(rc == 0 and got and " " in got[0] and stat.S_ISFIFO(os.lstat(fifo).st_mode),
          "a FIFO: written, still a FIFO: rc %d %r" % (rc, err))
    # A lone surrogate in a frame's name (a hand-made "\udc80"): written as
    # its escape (before: a UnicodeEncodeError traceback).
    with open(files[0]) as f:
        odd = json.load(f)
    for site in odd["sites"]["top"]:
        for fr in site["frames"][:1]:
            fr["function"] = "fn\udc80"
    odd_path, odd_txt = os.path.join(tmp, "surrogate.json"), os.path.join(outdir, "s.txt")
    with open(odd_path, "w") as f:
        json.dump(odd, f)
    rc, out, err = run([launcher, "report", "--flame-of", "total", "--collapsed", odd_txt, odd_path], clean_env())
    written = b""
    if os.path.exists(odd_txt):
        with open(odd_txt, "rb") as f:
            written = f.read()
    check(rc == 0 and "Traceback" not in err and b"fn\\udc80" in written,
          "a lone surrogate in a frame: written escaped: rc %d %r" % (rc, err[-300:]))
    rc, out, err = collapsed_to(outdir)
    check(rc == 1 and "cannot write %s" % outdir in err and "Traceback" not in err, "a directory: refused: %r" % err)
    check(not [n for n in os.listdir(outdir) if n.endswith(".tmp")], "no temporary file left: %s" % os.listdir(outdir))
    if os.geteuid() == 0:
        # Another user's link in a directory of theirs (not sticky: the
        # kernel's protected_symlinks does not apply), as root.
        fresh_victim()
        shared = os.path.join(tmp, "shared")
        os.mkdir(shared)
        planted = os.path.join(shared, "peak.svg")
        os.symlink(victim, planted)
        os.lchown(planted, 65534, 65534)
        os.chown(shared, 65534, 65534)
        rc, out, err = run([launcher, "report", "--flame", planted, files[0]], clean_env())
        check(rc == 1 and victim_kept() and os.path.islink(planted) and "a symlink of another user" in err,
              "root: another user's link not followed: rc %d %r" % (rc, err[-300:]))
        fifo2 = os.path.join(shared, "fifo")
        os.mkfifo(fifo2)
        os.chown(fifo2, 65534, 65534)
        try:
            rc, out, err = run([launcher, "report", "--flame", fifo2, files[0]], clean_env(), timeout=30)
        except subprocess.TimeoutExpired:
            rc, err = None, "opened it and waited for a reader"
        check(rc == 1 and "a FIFO of another user" in err, "root: another user's FIFO not written: rc %s %r"
              % (rc, err[-300:]))
    else:
        print("not root: another user's link and FIFO not tried")

finish()
