"""`lowtide compare --with glibc-tuned,jemalloc-tuned`:

  compare_presets_test.py LAUNCHER BUILD_DIR

The tuned presets run the command with exactly their settings: under
glibc-tuned GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072 and no
preload; under jemalloc-tuned LD_PRELOAD=libjemalloc.so.2 and
MALLOC_CONF=background_thread:true,dirty_decay_ms:500,muzzy_decay_ms:0;
the lowtide run has neither, and no run has the launcher's
LOWTIDE_BUILD_DIR. The command prints its environment, so what
each run got is read back from DIR/<allocator>.out. `compare --help` lists
both presets with their settings, and an unknown name is refused."""
import json
import os
import sys
import tempfile

from tools_common import check, clean_env, finish, run

launcher, build = sys.argv[1], os.path.abspath(sys.argv[2])
GLIBC = "glibc.malloc.mmap_threshold=131072"
JEMALLOC = "background_thread:true,dirty_decay_ms:500,muzzy_decay_ms:0"
KEYS = ("GLIBC_TUNABLES", "MALLOC_CONF", "LD_PRELOAD")
# LOWTIDE_BUILD_DIR: the launcher's own, given to no run (compare passed it
# on to lowtide's run).
PRINT_ENV = "import json, os; print(json.dumps({k: os.environ.get(k) for k in %r}))" % (KEYS + ("LOWTIDE_BUILD_DIR",),)

with tempfile.TemporaryDirectory(prefix="lowtide-presets-") as tmp:
    out = os.path.join(tmp, "cmp")
    env = clean_env(LOWTIDE_BUILD_DIR=build)
    for k in KEYS:
        env.pop(k, None)
    rc, stdout, err = run([launcher, "compare", "--with", "glibc-tuned,jemalloc-tuned", "--out", out, "--",
                           "/usr/bin/python3", "-c", PRINT_ENV], env, timeout=120)
    check(rc == 0, "compare rc %d: %s" % (rc, err[-2000:]))
    got = {}
    for name in ("glibc-tuned", "jemalloc-tuned", "lowtide"):
        try:
            with open(os.path.join(out, name + ".out")) as f:
                got[name] = json.loads(f.read())
        except (OSError, ValueError) as e:
            check(False, "%s: no environment printed: %s" % (name, e))
            got[name] = {}
    g, j, lt = got["glibc-tuned"], got["jemalloc-tuned"], got["lowtide"]
    check(g.get("GLIBC_TUNABLES") == GLIBC, "glibc-tuned: GLIBC_TUNABLES=%r" % g.get("GLIBC_TUNABLES"))
    check(g.get("MALLOC_CONF") is None and g.get("LD_PRELOAD") is None, "glibc-tuned: nothing else set: %r" % g)
    check(j.get("MALLOC_CONF") == JEMALLOC, "jemalloc-tuned: MALLOC_CONF=%r" % j.get("MALLOC_CONF"))
    check(os.path.basename(j.get("LD_PRELOAD") or "") == "libjemalloc.so.2",
          "jemalloc-tuned: LD_PRELOAD=%r" % j.get("LD_PRELOAD"))
    check(j.get("GLIBC_TUNABLES") is None, "jemalloc-tuned: no GLIBC_TUNABLES: %r" % j)
    check(lt.get("GLIBC_TUNABLES") is None and lt.get("MALLOC_CONF") is None,
          "lowtide's run gets neither tunable: %r" % lt)
    check("liblowtide" in (lt.get("LD_PRELOAD") or ""), "lowtide's run preloads lowtide: %r" % lt)
    check(all(r.get("LOWTIDE_BUILD_DIR") is None for r in (g, j, lt)),
          "no run gets the launcher's LOWTIDE_BUILD_DIR: %r" % [g, j, lt])
    with open(os.path.join(out, "compare.md")) as f:
        md = f.read()
    for name in ("glibc-tuned", "jemalloc-tuned"):
        check(("| %s | 0 |" % name) in md, "compare.md row for %s" % name)

    rc, stdout, err = run([launcher, "compare", "--help"], env, timeout=60)
    flat = "".join(stdout.split())  # argparse wraps lines, also inside names
    check(rc == 0, "compare --help rc %d" % rc)
    check("glibc-tuned(GLIBC_TUNABLES=%s)" % GLIBC in flat, "--help lists glibc-tuned: %s" % stdout)
    check("jemalloc-tuned(MALLOC_CONF=%swithjemalloc)" % JEMALLOC in flat, "--help lists jemalloc-tuned")

    rc, stdout, err = run([launcher, "compare", "--with", "glibc-tunned", "--out", out, "--", "/bin/true"], env,
                          timeout=60)
    check(rc == 2 and "unknown allocator(s) glibc-tunned" in err and "jemalloc-tuned" in err,
          "an unknown name is refused, the known ones listed: rc %d %r" % (rc, err))

    # An output directory whose name has "%" (LOWTIDE_STATS_FILE's pattern
    # character) or "[" (glob's): lowtide's report is written there and
    # found. Before, "%p" and "%%" sent it elsewhere and "[1]" hid it from
    # the glob: compare.md said "lowtide wrote no report".
    for name in ("run%p", "100%%", "run[1]"):
        odd = os.path.join(tmp, name)
        rc, stdout, err = run([launcher, "compare", "--with", "lowtide", "--out", odd, "--",
                               "/usr/bin/python3", "-c", "b = bytearray(3 << 20)"], env, timeout=120)
        written = [n for n in os.listdir(odd) if n.startswith("lowtide-report.")] if os.path.isdir(odd) else []
        check(rc == 0 and len(written) == 1, "--out %s: rc %d, one report in it: %r" % (name, rc, written))
        check("From 1 JSON report(s)" in stdout and "wrote no report" not in stdout,
              "--out %s: compare.md has lowtide's report: %s" % (name, stdout[-600:]))

    # An --out that cannot be a directory: said in one line, exit 2 (before:
    # a FileExistsError traceback).
    blocker = os.path.join(tmp, "a-file")
    open(blocker, "w").close()
    for bad in (blocker, os.path.join(blocker, "sub")):
        rc, stdout, err = run([launcher, "compare", "--with", "lowtide", "--out", bad, "--", "/bin/true"], env,
                              timeout=60)
        check(rc == 2 and "cannot use %s for the output" % bad in err and "Traceback" not in err,
              "--out %s: refused: rc %d %r" % (bad, rc, err[-300:]))

finish()
