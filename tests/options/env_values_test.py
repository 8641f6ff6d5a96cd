#!/usr/bin/python3
"""Every LOWTIDE_* variable with empty, garbage, negative, huge and
overflowing values, in a real host (/usr/bin/python3 under the shim): the
host must run normally, stderr must hold exactly one warning naming the
variable, the value and the default, and lowtide must behave as with no
variable at all. What the host observes (through lowtide_get_stats, /proc
and smaps): which sizes take the large path, whether freed large blocks are
cached, whether the decay thread runs, whether 4 MiB blocks are advised for huge pages (only with advise),
how large the reserved range is, and what the exit report does.
(tests/unit/options_test.cpp checks the parsed values themselves, for many
more spellings.)

Usage: env_values_test.py <liblowtide.so>"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env, failures  # noqa: E402

PROBE = r'''
import ctypes, json, os, sys, time

lib = ctypes.CDLL(None)
lib.lowtide_stats_fields.restype = ctypes.c_char_p
FIELDS = lib.lowtide_stats_fields().decode().split(",")
class S(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(f, ctypes.c_uint64) for f in FIELDS]
def stats():
    s = S(); s.size = ctypes.sizeof(S); assert lib.lowtide_get_stats(ctypes.byref(s)) == 0; return s
def large_maps(n):
    before = stats().large_maps; b = bytearray(n); after = stats().large_maps; del b; return after - before
facts = {"large_100k": large_maps(100 * 1024), "large_128k": large_maps(128 * 1024 + 64)}
b = bytearray(4 << 20)
b[:: 4096] = b"x" * len(b[:: 4096])
addr = ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b))
flags = ""
with open("/proc/self/smaps") as f:
    cur = None
    for line in f:
        head = line.split()
        if "-" in head[0] and len(head) >= 5:
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            cur = lo <= addr + (2 << 20) < hi
        elif cur and line.startswith("VmFlags:"):
            flags = line
facts["hugepage_advised"] = " hg" in flags
del b
facts["cached_after_free"] = stats().large_cached_bytes > 0
def names():
    out = []
    for t in os.listdir("/proc/self/task"):
        try:
            out.append(open(f"/proc/self/task/{t}/comm").read().strip())
        except OSError:
            pass
    return out
# The decay thread names itself once it runs, a moment after the large
# allocation that starts it: looked for until it is there (5 s at most),
# not once (a loaded machine may not have run it yet).
until = time.monotonic() + 5
while "lowtide-decay" not in names() and time.monotonic() < until:
    time.sleep(0.01)
facts["decay_thread"] = "lowtide-decay" in names()
with open("/proc/self/maps") as f:
    spans = [tuple(int(x, 16) for x in l.split()[0].split("-")) for l in f]
runs, start, end = [], None, None
for lo, hi in spans:
    if lo != end:
        if start is not None: runs.append(end - start)
        start = lo
    end = hi
runs.append(end - start)
facts["largest_run_tib"] = max(runs) >> 40
print(json.dumps(facts, sort_keys=True))
print("host says hello", file=sys.stderr)
'''

OPTIONS = {  # variable: values that must each be rejected
    "LOWTIDE_CUTOFF": ["", "   ", "abc", "-1", "1.5M", "0x100", "99999999999999999999999", "16777216T", "1",
                       "4095", "2T", "18446744073709551615", "9" * 3000],
    "LOWTIDE_RESERVE": ["", "lots", "-64M", "1e12", "99999999999999999999999", "63M", "65T", "18446744073709551615"],
    "LOWTIDE_CACHE": ["", "none", "autoo", "-1", "2T", "99999999999999999999999", "16777216T"],
    "LOWTIDE_DECAY_MS": ["", "soon", "-5", "0", "3600001", "99999999999999999999999", "1.5", "1K", "2d", "61m", "0s",
                         "3601s"],
    "LOWTIDE_DECAY_THREAD": ["", "yes", "-1", "2", "onn", "99999999999999999999"],
    "LOWTIDE_HUGEPAGES": ["", "always", "-1", "0", "offf", "99999999999999999999"],
    "LOWTIDE_STATS": ["", "verbose", "-1", "7", "jsonn", "99999999999999999999"],
    "LOWTIDE_STATS_FILE": ["", "/tmp/" + "p" * 1100],
}
DEFAULTS = {"LOWTIDE_CUTOFF": "128KiB", "LOWTIDE_RESERVE": "1TiB", "LOWTIDE_CACHE": "auto",
            "LOWTIDE_DECAY_MS": "500ms", "LOWTIDE_DECAY_THREAD": "on", "LOWTIDE_HUGEPAGES": "on",
            "LOWTIDE_STATS": "off", "LOWTIDE_STATS_FILE": "stderr"}


def run(lib, **kv):
    return lttest.run(["/usr/bin/python3", "-c", PROBE], clean_env(lib, **kv), 60)


def main():
    lib = sys.argv[1]
    rc, base_out, base_err = run(lib)
    check(rc == 0 and base_err == "host says hello\n", f"baseline run: exit {rc}, stderr {base_err[:300]!r}")
    facts = json.loads(base_out)
    check(facts == {"large_100k": 0, "large_128k": 1, "hugepage_advised": False, "cached_after_free": True,
                    "decay_thread": True, "largest_run_tib": 1}, f"the defaults as the host sees them: {facts}")
    runs = 0
    for var, values in OPTIONS.items():
        for value in values:
            rc, out, err = run(lib, **{var: value})
            runs += 1
            what = f"{var}={value[:40]!r}"
            check(rc == 0, f"{what}: host exit status {rc}")
            check(out == base_out, f"{what}: behaves differently from the defaults: {out.strip()}")
            lines = err.splitlines(keepends=True)
            warn = [ln for ln in lines if ln.startswith("lowtide:")]
            check(len(warn) == 1 and sorted(lines) == sorted(warn + ["host says hello\n"]),
                  f"{what}: one warning and the host's own line: {[ln[:120] for ln in lines]}")
            if warn:
                w = warn[0]
                check(w.startswith(f"lowtide: warning: {var}='") and w.endswith(f"; using the default {DEFAULTS[var]}\n"),
                      f"{what}: warning names the variable and the default: {w[:200]!r}")
    # The report's file name rejected: the report (asked for) goes to stderr, its default.
    rc, out, err = run(lib, LOWTIDE_STATS="text", LOWTIDE_STATS_FILE="")
    check(rc == 0 and "==== lowtide" in err and err.count("lowtide: warning:") == 1,
          f"LOWTIDE_STATS_FILE='' with LOWTIDE_STATS=text: the report on stderr: {err[:300]!r}")
    print(f"env_values: {runs} runs of python3 with a bad value, {len(OPTIONS)} variables")
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("PASS env_values")


if __name__ == "__main__":
    main()
