"""lowtide's C API from Python through ctypes, in a process running under
LD_PRELOAD=liblowtide.so (meson's preload_env): lowtide_get_stats counts
what the script does, respects the size field, and rejects bad arguments;
lowtide_write_report and malloc_stats() write reports on demand."""
import ctypes
import errno
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from lttest import check, failures  # noqa: E402


lib = ctypes.CDLL(None, use_errno=True)
# The struct's fields as the library names them (stats_layout_test.py checks
# that list against the header).
lib.lowtide_stats_fields.restype = ctypes.c_char_p
FIELDS = lib.lowtide_stats_fields().decode().split(",")


class Stats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(f, ctypes.c_uint64) for f in FIELDS]


lib.lowtide_version.restype = ctypes.c_char_p
lib.lowtide_get_stats.argtypes = [ctypes.c_void_p]
lib.lowtide_write_report.argtypes = [ctypes.c_char_p, ctypes.c_int]


def get():
    s = Stats()
    s.size = ctypes.sizeof(Stats)
    rc = lib.lowtide_get_stats(ctypes.byref(s))
    check(rc == 0 and s.size == ctypes.sizeof(Stats), f"lowtide_get_stats rc {rc} size {s.size}")
    return s


MiB = 1 << 20
check(ctypes.sizeof(Stats) == 8 + 8 * len(FIELDS), "struct layout")
check(lib.lowtide_version().decode().count(".") == 2, "lowtide_version")

before = get()
bufs = [bytearray(3 * MiB) for _ in range(10)]
held = get()
del bufs
# Freed large blocks may sit in the reuse cache until they decay;
# lowtide_release() gives them back now.
lib.lowtide_release.restype = ctypes.c_size_t
lib.lowtide_release()
after = get()
allocs = lambda s: s.malloc_calls + s.calloc_calls + s.realloc_calls + s.aligned_calls
check(allocs(held) - allocs(before) >= 10, f"allocating calls grew by >= 10: {allocs(held) - allocs(before)}")
check(held.large_maps - before.large_maps >= 10, f"large_maps grew by >= 10: {held.large_maps - before.large_maps}")
check(held.large_requested - before.large_requested >= 30 * MiB, "large_requested grew by >= 30 MiB")
check(held.large_live - before.large_live >= 30 * MiB, "large_live grew by >= 30 MiB while held")
check(held.large_peak_live >= held.large_live, "peak >= live")
check(after.large_unmaps - held.large_unmaps >= 10, "large_unmaps grew by >= 10 after del")
check(after.free_calls - held.free_calls >= 10, "free_calls grew by >= 10 after del")
check(after.large_returned_bytes - held.large_returned_bytes >= 30 * MiB, "returned >= 30 MiB after del")
check(held.large_live - after.large_live >= 30 * MiB, "large_live fell by >= 30 MiB after del")
check(after.large_live == after.large_out - after.large_freed, "large_live = out - freed")
check(after.threads >= 1, "threads >= 1")

# size = 16: only size and malloc_calls are written; the rest stays as it was.
s = Stats()
ctypes.memset(ctypes.byref(s), 0xAB, ctypes.sizeof(s))
s.size = 16
check(lib.lowtide_get_stats(ctypes.byref(s)) == 0, "size 16 accepted")
check(s.size == 16 and s.malloc_calls not in (0, 0xABABABABABABABAB), f"size kept, malloc_calls written: {s.malloc_calls:#x}")
check(all(getattr(s, f) == 0xABABABABABABABAB for f in FIELDS[1:]), "nothing past the first 16 bytes written")
# size too small, and NULL: -1, EINVAL
for arg in (8, None):
    ctypes.set_errno(0)
    if arg is None:
        rc = lib.lowtide_get_stats(None)
    else:
        t = Stats()
        t.size = arg
        rc = lib.lowtide_get_stats(ctypes.byref(t))
    check(rc == -1 and ctypes.get_errno() == errno.EINVAL, f"lowtide_get_stats({arg}) -> -1 EINVAL")

with tempfile.TemporaryDirectory(prefix="lowtide-api-") as tmp:
    path = os.path.join(tmp, "now.%p.json")
    check(lib.lowtide_write_report(path.encode(), 2) == 0, "lowtide_write_report json")
    with open(os.path.join(tmp, f"now.{os.getpid()}.json")) as f:
        r = json.load(f)
    check(r["pid"] == os.getpid() and r["schema"] == "lowtide-report" and r["partial"] is False, "on-demand JSON")
    check(r["version"] == lib.lowtide_version().decode(), "version matches lowtide_version()")
    tpath = os.path.join(tmp, "now.txt")
    check(lib.lowtide_write_report(tpath.encode(), 1) == 0, "lowtide_write_report text")
    with open(tpath) as f:
        check(f.read().startswith("==== lowtide "), "on-demand text")
    # LOWTIDE_REPORT_PROMETHEUS (4), whatever the name; format 0 picks it for a ".prom" name.
    ppath = os.path.join(tmp, "now.metrics")
    check(lib.lowtide_write_report(ppath.encode(), 4) == 0, "lowtide_write_report prometheus")
    with open(ppath) as f:
        check(f.read().startswith("# HELP lowtide_info "), "on-demand Prometheus text")
    check(lib.lowtide_write_report(os.path.join(tmp, "now.prom").encode(), 0) == 0, "format 0 to a .prom file")
    with open(os.path.join(tmp, "now.prom")) as f:
        check(f.read().startswith("# HELP lowtide_info "), "a .prom file gets the Prometheus text")
    ctypes.set_errno(0)
    check(lib.lowtide_write_report(tpath.encode(), 5) == -1 and ctypes.get_errno() == errno.EINVAL,
          "format 5 -> -1 EINVAL")
    check(sorted(os.listdir(tmp)) == sorted(["now.txt", "now.metrics", "now.prom", f"now.{os.getpid()}.json"]),
          "no temporary files left")

# malloc_stats() and the configured format (0) with stats off: text on stderr.
env = {k: v for k, v in os.environ.items() if not k.startswith("LOWTIDE_")}
for code in ("import ctypes; ctypes.CDLL(None).malloc_stats()",
             "import ctypes; ctypes.CDLL(None).lowtide_write_report(None, 0)"):
    p = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    err = p.stderr.decode()
    check(p.returncode == 0 and err.startswith("==== lowtide ") and "-- request sizes --" in err
          and '{"schema"' not in err, f"{code}: text report on stderr: {err[:200]!r}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("ok")
