"""`lowtide compare`:

  compare_test.py LAUNCHER BUILD_DIR

1. Under glibc and every Debian peer and lowtide, a command whose process
   tree holds ~96 MiB in two children at once (48 MiB each, no process more
   than ~60 MiB): the table has one row per allocator, every run's sampled
   tree peak sees both children together (more than any one process's
   kernel high-water mark), the PNG and samples exist, lowtide's report is
   merged in.
2. A peer library that is missing and matplotlib that cannot be imported
   are named with their Debian packages, and the rest still runs."""
import json
import os
import sys
import tempfile

from tools_common import check, clean_env, finish, run

launcher, build = sys.argv[1], os.path.abspath(sys.argv[2])
MiB = 1 << 20
ALL = ["glibc", "jemalloc", "mimalloc", "tcmalloc", "lowtide"]

# Two children hold 48 MiB each (touched, so resident) at the same time:
# the parent waits until both have built theirs, then lets them go.
TREE = r"""
import os, subprocess, sys, time
child = ("import sys, time\n"
         "b = [bytearray(4 << 20) for _ in range(12)]\n"
         "print('ready', flush=True)\n"
         "sys.stdin.read()\n")
ps = [subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
      for _ in range(2)]
for p in ps:
    assert p.stdout.readline() == b"ready\n"
time.sleep(0.3)  # several 20 ms samples of both children alive
for p in ps:
    p.stdin.close()
    p.wait()
"""

with tempfile.TemporaryDirectory(prefix="lowtide-compare-") as tmp:
    out = os.path.join(tmp, "cmp")
    env = clean_env(LOWTIDE_BUILD_DIR=build)
    rc, stdout, err = run([launcher, "compare", "--out", out, "--", "/usr/bin/python3", "-c", TREE], env,
                          timeout=300)
    check(rc == 0, "compare rc %d: %s" % (rc, err[-2000:]))
    with open(os.path.join(out, "samples.json")) as f:
        s = json.load(f)
    runs = {r["allocator"]: r for r in s["runs"]}
    check(list(runs) == ALL, "one run per allocator, lowtide last: %s" % list(runs))
    for name, r in runs.items():
        check(r["exit"] == 0, "%s: command exit 0" % name)
        check(r["peak_rss"] >= 96 * MiB, "%s: tree peak %.1f MiB >= 96 MiB" % (name, r["peak_rss"] / MiB))
        check(r["peak_rss"] > r["max_process_rss"], "%s: tree peak %.1f MiB > largest process %.1f MiB"
              % (name, r["peak_rss"] / MiB, r["max_process_rss"] / MiB))
        check(len(r["samples"]) >= 10, "%s: %d samples" % (name, len(r["samples"])))
        check(r["preload_seen"] is (None if name == "glibc" else True), "%s: preload seen in maps" % name)
    with open(os.path.join(out, "compare.md")) as f:
        md = f.read()
    for name in ALL:
        check(("| %s | 0 |" % name) in md, "compare.md row for %s" % name)
    check(md in stdout, "the table is printed too")
    # lowtide's report: the parent and both children (exec'd, %p).
    check("total over 3 processes" in md, "lowtide's merged report covers the 3 processes")
    with open(os.path.join(out, "rss.png"), "rb") as f:
        check(f.read(8) == b"\x89PNG\r\n\x1a\n", "rss.png is a PNG")

    # A missing peer and no matplotlib: named, and the rest still runs.
    fake = os.path.join(tmp, "fake")
    os.makedirs(os.path.join(fake, "matplotlib"))
    with open(os.path.join(fake, "matplotlib", "__init__.py"), "w") as f:
        f.write("raise ImportError('hidden by the test')\n")
    out2 = os.path.join(tmp, "cmp2")
    env2 = dict(env, PYTHONPATH=fake, LOWTIDE_PEER_LIBDIR=os.path.join(tmp, "no-libs"))
    rc, stdout, err = run([launcher, "compare", "--with", "glibc,jemalloc", "--out", out2, "--",
                           "/usr/bin/python3", "-c", "b = bytearray(8 << 20)"], env2, timeout=120)
    check(rc == 0, "compare without jemalloc and matplotlib: rc %d %s" % (rc, err))
    check("jemalloc skipped" in err and "apt-get install libjemalloc2" in err, "missing peer named: %r" % err)
    check("apt-get install python3-matplotlib" in err, "missing matplotlib named")
    check(not os.path.exists(os.path.join(out2, "rss.png")), "no PNG without matplotlib")
    with open(os.path.join(out2, "samples.json")) as f:
        check([r["allocator"] for r in json.load(f)["runs"]] == ["glibc", "lowtide"], "glibc and lowtide ran")
    rc, stdout, err = run([launcher, "compare", "--with", "glibc,ptmalloc9", "--", "true"], env)
    check(rc == 2 and "unknown allocator(s) ptmalloc9" in err, "unknown allocator refused: %r" % err)

finish()
