#!/usr/bin/python3
"""What the dynamic linker actually binds malloc, free and operator new to.

usage: bindings_test.py /path/to/liblowtide.so /path/to/bindings_prog

Runs two hosts with LD_PRELOAD=liblowtide.so and LD_DEBUG=bindings (output
to files via LD_DEBUG_OUTPUT), each twice: with lazy binding (the default:
symbols bound at first call) and with LD_BIND_NOW=1 (every reference of
every loaded object bound at start-up):

  * /usr/bin/python3 running a small script that allocates (small and
    large bytearrays, lists, dicts, numpy arrays) and checks that
    lowtide_version is visible;
  * bindings_prog, a C++ program using malloc/free and operator new/delete.

Asserts, over all binding lines of each run:
  * `malloc` and `free` (and `_Znwm` for the C++ program) are bound at
    least once, and every binding of them goes to liblowtide.so;
  * none goes to libc.so.6, libmimalloc.so.2 (or, for the operators,
    libstdc++.so.6).
Both hosts must also exit 0.

Then both hosts run again with call sites on (LOWTIDE_SITES=5,
LOWTIDE_SITE_SAMPLE=0: lowtide dlopens libunwind.so.8 at start-up and unwinds
at every large allocation). libunwind exports 18 `_Unwind_*` symbols; loaded
RTLD_LOCAL they must stay out of the global scope. Asserts:
  * libunwind.so.8 is loaded (some binding line has it as its source or
    destination), so the runs really had sites on;
  * every `_Unwind_*` binding from an object other than libunwind itself goes
    to libgcc_s.so.1; at least one such binding is seen in each run of the
    C++ program (it throws) and in python3's LD_BIND_NOW run (libstdc++'s
    references are bound at start-up).
"""

import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict

PY_SCRIPT = r"""
import ctypes, sys
lt = ctypes.CDLL(None)
try:
    lt.lowtide_version
except AttributeError:
    sys.exit("lowtide_version not found: liblowtide is not loaded")
keep = []
for i in range(2000):
    keep.append({"i": i, "s": "x" * (i % 700), "l": list(range(i % 90))})
big = bytearray()
for _ in range(64):
    big += b"y" * 65536          # grows through realloc into the large path
blobs = [bytearray(3 << 20) for _ in range(4)]
del big, blobs
try:
    import numpy as np
    a = np.ones((1024, 1024))     # 8 MiB
    b = (a * 2).sum()
    assert b == 2 * 1024 * 1024, b
    del a
except ImportError:
    pass
print("python host ok", len(keep))
"""

# binding file /usr/bin/python3 [0] to /x/liblowtide.so [0]: normal symbol `malloc' [GLIBC_2.2.5]
BINDING = re.compile(
    r"binding file (?P<src>.+?) \[\d+\] to (?P<dst>.+?) \[\d+\]: "
    r"(?:normal|protected|weak) symbol `(?P<sym>[^']+)'(?: \[(?P<ver>[^\]]+)\])?")

FORBIDDEN = ("libc.so.6", "libmimalloc.so", "libstdc++.so")


def run_host(name, argv, lib, bind_now, tmpdir, extra_env=None):
    prefix = os.path.join(tmpdir, "%s%s" % (name, "-now" if bind_now else "-lazy"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOWTIDE_")}
    env.update(extra_env or {})
    env["LD_PRELOAD"] = lib
    env["LD_DEBUG"] = "bindings"
    env["LD_DEBUG_OUTPUT"] = prefix
    if bind_now:
        env["LD_BIND_NOW"] = "1"
    else:
        env.pop("LD_BIND_NOW", None)
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=60)
    # LD_DEBUG_OUTPUT writes <prefix>.<pid>, one file per process
    files = [os.path.join(tmpdir, f) for f in os.listdir(tmpdir)
             if os.path.join(tmpdir, f).startswith(prefix + ".")]
    lines = []
    for f in files:
        with open(f, errors="replace") as fh:
            lines.extend(fh.read().splitlines())
    return p, lines


def defines(path, sym):
    """True if path's dynamic symbol table defines sym (nm -D --defined-only)."""
    p = subprocess.run(["nm", "-D", "--defined-only", path], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, universal_newlines=True)
    return any(line.split()[-1].split("@")[0] == sym for line in p.stdout.splitlines()
               if line.strip())


def is_same(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


def check(label, proc, lines, lib, symbols):
    failures = []
    if proc.returncode != 0:
        failures.append("%s exited %d\nstdout: %s\nstderr: %s"
                        % (label, proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:]))
    lib_real = os.path.realpath(lib)
    lib_base = os.path.basename(lib_real)
    dests = {s: defaultdict(int) for s in symbols}
    # (src, sym) -> set of destinations, to follow canonical PLT entries
    by_src = defaultdict(set)
    for line in lines:
        m = BINDING.search(line)
        if not m or m.group("sym") not in dests:
            continue
        dests[m.group("sym")][m.group("dst")] += 1
        by_src[(os.path.realpath(m.group("src")), m.group("sym"))].add(m.group("dst"))
    print("%s: %d LD_DEBUG lines" % (label, len(lines)))
    for sym in symbols:
        d = dests[sym]
        print("  %-6s -> %s" % (sym, ", ".join("%s x%d" % (k, v) for k, v in sorted(d.items()))
                                or "(never bound)"))
        if not d:
            failures.append("%s: `%s' was never bound (no binding line)" % (label, sym))
        for dst, n in d.items():
            is_lowtide = (os.path.realpath(dst) == lib_real
                          or os.path.basename(dst) == lib_base)
            if not is_lowtide and not defines(dst, sym):
                # A non-PIE executable that takes malloc's address (Debian's
                # python3 does) has an undefined symbol with a value: its
                # canonical PLT entry. Other objects bind to that stub, which
                # jumps wherever the executable's own reference was bound.
                # Accept it only if that reference went to lowtide.
                own = by_src.get((os.path.realpath(dst), sym), set())
                own_lt = [o for o in own if is_same(o, lib_real)]
                if own_lt:
                    print("    (%s: %s's canonical PLT entry for `%s', which is bound to %s)"
                          % (dst, os.path.basename(dst), sym, lib_base))
                    continue
                failures.append("%s: `%s' bound %d time(s) to %s, which does not define "
                                "it, and whose own reference is not bound to lowtide (%s)"
                                % (label, sym, n, dst, ", ".join(sorted(own)) or "no binding"))
                continue
            if not is_lowtide:
                bad = [f for f in FORBIDDEN if f in os.path.basename(dst)]
                failures.append("%s: `%s' bound %d time(s) to %s%s" % (
                    label, sym, n, dst,
                    " (the allocator lowtide replaces!)" if bad else " (not liblowtide)"))
    return failures


def check_unwind(label, proc, lines, need_binding):
    failures = []
    if proc.returncode != 0:
        failures.append("%s exited %d\nstderr: %s" % (label, proc.returncode, proc.stderr[-2000:]))
    if "lowtide:" in proc.stderr:
        failures.append("%s: lowtide warned: %s" % (label, proc.stderr[-1000:]))
    loaded = False
    seen = defaultdict(int)
    for line in lines:
        m = BINDING.search(line)
        if not m:
            continue
        src, dst = os.path.basename(m.group("src")), os.path.basename(m.group("dst"))
        if src.startswith("libunwind.so") or dst.startswith("libunwind.so"):
            loaded = True
        if not m.group("sym").startswith("_Unwind_") or src.startswith("libunwind.so"):
            continue
        seen[(m.group("sym"), dst)] += 1
        if not dst.startswith("libgcc_s.so"):
            failures.append("%s: `%s' from %s bound to %s, not libgcc_s" % (label, m.group("sym"), src, dst))
    print("%s: libunwind loaded: %s; _Unwind_* bindings: %s" % (
        label, loaded, ", ".join("%s->%s x%d" % (k[0], k[1], v) for k, v in sorted(seen.items())) or "none"))
    if not loaded:
        failures.append("%s: libunwind.so.8 never appears: were call sites on?" % label)
    if need_binding and not seen:
        failures.append("%s: no _Unwind_* binding seen, nothing was checked" % label)
    return failures


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: bindings_test.py /path/to/liblowtide.so /path/to/bindings_prog")
    lib, prog = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    for p in (lib, prog):
        if not os.path.exists(p):
            sys.exit("FAIL: %s does not exist" % p)
    failures = []
    with tempfile.TemporaryDirectory(prefix="lowtide-bindings-") as tmp:
        script = os.path.join(tmp, "host.py")
        with open(script, "w") as f:
            f.write(PY_SCRIPT)
        for bind_now in (False, True):
            mode = "LD_BIND_NOW=1" if bind_now else "lazy"
            p, lines = run_host("python", ["/usr/bin/python3", script], lib, bind_now, tmp)
            failures += check("python3 (%s)" % mode, p, lines, lib, ["malloc", "free"])
            p, lines = run_host("cxx", [prog], lib, bind_now, tmp)
            failures += check("bindings_prog (%s)" % mode, p, lines, lib,
                              ["malloc", "free", "_Znwm"])
        sites = {"LOWTIDE_SITES": "5", "LOWTIDE_SITE_SAMPLE": "0"}
        for bind_now in (False, True):
            mode = "LD_BIND_NOW=1" if bind_now else "lazy"
            p, lines = run_host("python-sites", ["/usr/bin/python3", script], lib, bind_now, tmp, sites)
            failures += check_unwind("python3 with sites (%s)" % mode, p, lines, bind_now)
            p, lines = run_host("cxx-sites", [prog], lib, bind_now, tmp, sites)
            failures += check_unwind("bindings_prog with sites (%s)" % mode, p, lines, True)
    if failures:
        print("\nFAIL: %d problem(s):" % len(failures))
        for f in failures:
            print("  - " + f)
        return 1
    print("PASS: malloc, free and _Znwm bind to %s only; with call sites on, _Unwind_* still bind "
          "to libgcc_s" % os.path.basename(lib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
