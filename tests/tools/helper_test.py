"""python/lowtide.py, the Python helper (PYTHONPATH points at it):

  helper_test.py LIB

Under lowtide (this script re-runs itself with LD_PRELOAD=LIB) every
function works and reflects what the process does; without it active() is
False and every other function raises lowtide.NotActive."""
import json
import os
import subprocess
import sys
import tempfile

from tools_common import check, clean_env, finish, run

MiB = 1 << 20
lib = sys.argv[1]
inner = len(sys.argv) > 2 and sys.argv[2] == "inner"

import lowtide  # noqa: E402

if not inner:
    env = clean_env(PYTHONPATH=os.environ["PYTHONPATH"])
    rc, out, err = run([sys.executable, __file__, lib, "inner"], dict(env, LD_PRELOAD=lib))
    if rc != 0:
        print(out, err, end="")
    check(rc == 0, "under lowtide: rc %d" % rc)

    rc, out, err = run([sys.executable, "-c", r"""
import json, lowtide
res = {"active": lowtide.active()}
for name, call in [("version", lowtide.version), ("stats", lowtide.stats), ("release", lowtide.release),
                   ("report", lambda: lowtide.report("/tmp/never-written.%p.json"))]:
    try:
        call()
        res[name] = "returned"
    except lowtide.NotActive as e:
        res[name] = str(e)
print(json.dumps(res))
"""], env)
    got = json.loads(out)
    check(rc == 0 and got["active"] is False, "active() False without lowtide: %r" % got)
    for name in ("version", "stats", "release", "report"):
        check("not running under lowtide" in got[name] and "lowtide run" in got[name],
              "%s() raises NotActive with what to do: %r" % (name, got[name]))
    finish()
    sys.exit(0)

# --- inside a process under lowtide ---
import ctypes  # noqa: E402

check(lowtide.active(), "active() under lowtide")
c = ctypes.CDLL(None)
c.lowtide_version.restype = ctypes.c_char_p
check(lowtide.version() == c.lowtide_version().decode(), "version() is lowtide_version()")

before = lowtide.stats()
check(sorted(before) == sorted(lowtide.STATS_FIELDS) and all(isinstance(v, int) for v in before.values()),
      "stats() has every field as an int")
bufs = [bytearray(3 * MiB) for _ in range(8)]
held = lowtide.stats()
check(held["large_maps"] - before["large_maps"] >= 8, "stats() sees 8 large blocks")
check(held["large_live"] - before["large_live"] >= 24 * MiB, "stats() sees 24 MiB live")
del bufs
released = lowtide.release()
after = lowtide.stats()
check(isinstance(released, int) and released >= 0, "release() returns a byte count: %r" % released)
check(after["large_cached_bytes"] == 0, "release() emptied the reuse cache: %d" % after["large_cached_bytes"])
check(held["large_live"] - after["large_live"] >= 24 * MiB, "large_live fell after del")

with tempfile.TemporaryDirectory(prefix="lowtide-helper-") as tmp:
    lowtide.report(os.path.join(tmp, "r.%p.json"))
    with open(os.path.join(tmp, "r.%d.json" % os.getpid())) as f:
        r = json.load(f)
    check(r["pid"] == os.getpid() and r["large"]["maps"] >= 8, "report() default: JSON with %p expanded")
    lowtide.report(os.path.join(tmp, "t.txt"), format="text")
    with open(os.path.join(tmp, "t.txt")) as f:
        check(f.read().startswith("==== lowtide "), "report(format='text')")
    lowtide.report(os.path.join(tmp, "b.txt"), format="both")
    with open(os.path.join(tmp, "b.txt")) as f:
        t = f.read()
        check(t.startswith("==== lowtide ") and '\n{"schema": "lowtide-report"' in t, "report(format='both')")
    lowtide.report(os.path.join(tmp, "p.txt"), format="prometheus")
    with open(os.path.join(tmp, "p.txt")) as f:
        t = f.read()
        check(t.startswith("# HELP lowtide_info ") and "\nlowtide_large_maps_total{pid=\"%d\"} " % os.getpid() in t,
              "report(format='prometheus')")
    # A path as bytes, as a path object, and a name that is not UTF-8 (a
    # str with os.fsdecode's surrogate): each written where it says.
    import pathlib
    for given, written in ((os.fsencode(os.path.join(tmp, "bytes.json")), "bytes.json"),
                           (pathlib.Path(tmp) / "path.json", "path.json"),
                           (os.path.join(tmp, os.fsdecode(b"raw\xff.json")), os.fsdecode(b"raw\xff.json"))):
        try:
            lowtide.report(given)
        except (OSError, UnicodeError) as e:
            check(False, "report(%r): %r" % (given, e))
        check(os.path.isfile(os.path.join(tmp, written)), "report(%r) wrote %r: %r" % (given, written, os.listdir(tmp)))
    # A name with a NUL in it is refused as os.open refuses it (ValueError),
    # not cut at the NUL: report("DIR/keep\0.json") wrote DIR/keep.
    for given in (os.path.join(tmp, "keep\0.json"), os.fsencode(os.path.join(tmp, "keep\0.json"))):
        try:
            lowtide.report(given)
            check(False, "report(%r): a name with NUL refused" % given)
        except ValueError:
            pass
        check(not os.path.exists(os.path.join(tmp, "keep")), "report(%r) wrote nothing at the name cut at NUL"
              % given)
    try:
        lowtide.report(os.path.join(tmp, "x"), format="xml")
        check(False, "format='xml' rejected")
    except ValueError:
        pass
    try:
        lowtide.report(os.path.join(tmp, "no-such-dir", "x.json"))
        check(False, "unwritable path raises OSError")
    except OSError as e:
        check(e.errno == 2, "unwritable path: errno ENOENT: %r" % e)
finish()
