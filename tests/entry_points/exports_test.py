#!/usr/bin/python3
"""lowtide's dynamic symbol table, checked against the allocators it replaces.

usage: exports_test.py /path/to/liblowtide.so

Runs NOT preloaded. At test time it takes `nm -D --defined-only` of
libc.so.6 and libmimalloc.so.2 (the ones liblowtide.so is linked against,
as ldd resolves them), keeps the allocation family, and asserts:

 1. lowtide exports (defined, as a function) every allocation-family
    symbol that libc.so.6 or libmimalloc.so.2 exports, and the 20
    replaceable operator new/delete forms;
 2. each of those is UNVERSIONED in lowtide: no `@` suffix in nm -D and no
    named version in objdump -T (a definition in a named node such as
    LOWTIDE_0.1 never wins over malloc@GLIBC_2.2.5 references);
 3. lowtide exports nothing but allocation-family symbols, lowtide_* and the
    _exit/_Exit report hooks, and sigaction/signal (which keep lowtide's
    SIGTERM/SIGINT report handler invisible: docs/report.md), and
    __cxa_atexit (the setuid guard for mimalloc's variables: src/init.hpp),
    mlockall/munlockall (MCL_FUTURE decides how frees release: platform.hpp),
    mlock/mlock2 (locked memory turns off growth by mremap),
    mprotect/pkey_mprotect (a freed block the program took write permission
    from is made writable before it is cached: platform.hpp),
    setrlimit/setrlimit64/prlimit/prlimit64 (a lower RLIMIT_AS has the
    large-block range cut to fit it: libc.hpp) and
    __register_atfork (lowtide's fork handlers registered first: init.hpp);
 4. it needs no library but libc.so.6 and libmimalloc.so.2 (DT_NEEDED).

GLIBC_PRIVATE symbols of libc (e.g. __libc_reallocarray) are not part of
libc's public interface and nothing outside glibc can bind to them; they
are listed, not required. Data symbols (the removed __malloc_hook & co.)
are not functions and not required either.
"""

import os
import re
import subprocess
import sys

# The allocation family, by name. Anything matching is an "allocation
# symbol": required when libc/mimalloc export it, allowed in lowtide.
FAMILY = re.compile(r"""^(?:
      malloc | free | calloc | realloc | memalign | valloc | pvalloc
    | aligned_alloc | posix_memalign | __posix_memalign
    | malloc_\w+ | mallinfo\w* | mallopt
    | cfree | vfree | reallocf | reallocarr | reallocarray
    | _aligned_malloc
    | __libc_(?:malloc|free|calloc|realloc|memalign|valloc|pvalloc|cfree
                |mallopt|mallinfo\w*|reallocarray|aligned_alloc|posix_memalign)
    | _Znw\w+ | _Zna\w+ | _Zdl\w+ | _Zda\w+
)$""", re.X)

OPERATORS = """
_Znwm _Znam _ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t
_ZnwmSt11align_val_t _ZnamSt11align_val_t
_ZnwmSt11align_val_tRKSt9nothrow_t _ZnamSt11align_val_tRKSt9nothrow_t
_ZdlPv _ZdaPv _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t
_ZdlPvm _ZdaPvm _ZdlPvSt11align_val_t _ZdaPvSt11align_val_t
_ZdlPvmSt11align_val_t _ZdaPvmSt11align_val_t
_ZdlPvSt11align_val_tRKSt9nothrow_t _ZdaPvSt11align_val_tRKSt9nothrow_t
""".split()

FUNCTION_TYPES = set("TWi")  # text, weak, indirect (ifunc)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stderr))
    return p.stdout


def nm_defined(path):
    """{name: (type, version or None, default_version)} from nm -D --defined-only."""
    syms = {}
    for line in run(["nm", "-D", "--defined-only", path]).splitlines():
        parts = line.split()
        if len(parts) == 3:
            _, typ, full = parts
        elif len(parts) == 2:  # absolute symbols may have no value column
            typ, full = parts
        else:
            continue
        if "@@" in full:
            name, ver = full.split("@@", 1)
            default = True
        elif "@" in full:
            name, ver = full.split("@", 1)
            default = False
        else:
            name, ver, default = full, None, True
        # keep the default version if a name is defined several times
        if name not in syms or default:
            syms[name] = (typ, ver, default)
    return syms


OBJDUMP_LINE = re.compile(
    r"^[0-9a-f]+\s(.{7})\s(\S+)\s+[0-9a-f]+\s+(?:(\S+)\s+)?(\S+)$")


def objdump_versions(path):
    """{name: version column} for defined dynamic symbols per objdump -T.
    The column is empty or 'Base' for unversioned symbols."""
    out = {}
    for line in run(["objdump", "-T", path]).splitlines():
        m = OBJDUMP_LINE.match(line.rstrip())
        if not m:
            continue
        flags, section, ver, name = m.groups()
        if section == "*UND*":
            continue
        out[name] = ver or ""
    return out


def resolve_deps(lib):
    """Paths of libc.so.6 and libmimalloc.so.2 as the loader resolves them
    for lib (ldd does not run lib's code for a shared object)."""
    found = {}
    for line in run(["ldd", lib]).splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
        if m:
            found[m.group(1)] = m.group(2)
    paths = {}
    for soname in ("libc.so.6", "libmimalloc.so.2"):
        p = found.get(soname)
        if p is None:
            # not linked (e.g. mimalloc loaded some other way): ask ldconfig
            for line in run(["/sbin/ldconfig", "-p"]).splitlines():
                m = re.match(r"\s*(\S+)\s+\(libc6,x86-64[^)]*\)\s+=>\s+(\S+)", line)
                if m and m.group(1) == soname:
                    p = m.group(2)
                    break
        if p is None or not os.path.exists(p):
            sys.exit("FAIL: cannot find %s (ldd %s gave %r)" % (soname, lib, found))
        paths[soname] = os.path.realpath(p)
    return paths


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: exports_test.py /path/to/liblowtide.so")
    lib = os.path.abspath(sys.argv[1])
    if not os.path.exists(lib):
        sys.exit("FAIL: %s does not exist" % lib)
    if os.environ.get("LD_PRELOAD"):
        print("note: LD_PRELOAD=%s is set; this test only reads files" % os.environ["LD_PRELOAD"])

    deps = resolve_deps(lib)
    print("lowtide:    %s" % os.path.realpath(lib))
    for k, v in deps.items():
        print("%-11s %s" % (k + ":", v))

    required = {}   # name -> [where it came from]
    private = []
    for soname, path in deps.items():
        for name, (typ, ver, _default) in nm_defined(path).items():
            if not FAMILY.match(name):
                continue
            if typ not in FUNCTION_TYPES:
                continue  # data: __malloc_hook & co.
            if ver == "GLIBC_PRIVATE":
                private.append("%s@%s (%s)" % (name, ver, soname))
                continue
            required.setdefault(name, []).append(soname)
    for name in OPERATORS:
        required.setdefault(name, []).append("C++ replaceable operators")

    mine = nm_defined(lib)
    versions = objdump_versions(lib)

    failures = []
    for name in sorted(required):
        where = ", ".join(required[name])
        if name not in mine:
            failures.append("missing export: %s (exported by %s)" % (name, where))
            continue
        typ, ver, _ = mine[name]
        if typ not in FUNCTION_TYPES:
            failures.append("%s is exported as nm type %r, not a function" % (name, typ))
        if ver is not None:
            failures.append("%s is versioned in lowtide: %s@%s (must be unversioned)"
                            % (name, name, ver))
        ov = versions.get(name)
        if ov is None:
            failures.append("%s: not in objdump -T's defined symbols" % name)
        elif ov not in ("", "Base"):
            failures.append("%s: objdump -T shows version node %r (must be none/Base)"
                            % (name, ov))

    # _exit and _Exit are interposed so a process leaving through them (a
    # forked worker's os._exit) still writes its report.
    # sigaction and signal show SIG_DFL where lowtide's SIGTERM/SIGINT
    # report handler stands in for it (src/signals.hpp).
    # __cxa_atexit: libmimalloc's constructor calls it before it reads
    # MIMALLOC_*, the one point lowtide can stop a setuid program from
    # obeying them (src/init.hpp).
    # mlockall/munlockall: whether MCL_FUTURE is in force decides how freed
    # large extents are released (src/platform.hpp drop_writable).
    # mlock/mlock2: mremap populates what it grows of a locked mapping, so
    # realloc grows by mremap only while nothing is locked
    # (src/platform.hpp mremap_growth_ok).
    # __register_atfork (what pthread_atfork calls): lowtide's own fork
    # handlers are registered before any other's (src/init.hpp).
    # mprotect/pkey_mprotect: a large block freed without write permission
    # is made writable again before the reuse cache keeps it
    # (src/platform.hpp writable_again).
    # setrlimit/prlimit and their 64 forms: a lower RLIMIT_AS has lowtide's
    # range cut to fit it first (src/libc.hpp prlimit).
    EXIT_HOOKS = {"_exit", "_Exit", "sigaction", "signal", "__cxa_atexit", "mlockall", "munlockall",
                  "mlock", "mlock2", "mprotect", "pkey_mprotect", "__register_atfork",
                  "setrlimit", "setrlimit64", "prlimit", "prlimit64"}
    missing_hooks = EXIT_HOOKS - set(mine)
    for name in sorted(missing_hooks):
        failures.append("missing exit hook export: %s" % name)
    extras = sorted(n for n in mine
                    if not FAMILY.match(n) and not n.startswith("lowtide_")
                    and n not in EXIT_HOOKS)
    for name in extras:
        typ, ver, _ = mine[name]
        failures.append("unexpected export: %s (nm type %s%s)"
                        % (name, typ, ", version %s" % ver if ver else ""))

    # lowtide_* API must be unversioned too, for the same reason
    for name in sorted(n for n in mine if n.startswith("lowtide_")):
        if mine[name][1] is not None:
            failures.append("%s is versioned: @%s" % (name, mine[name][1]))

    # 4. What lowtide loads into every host: mimalloc and libc, nothing else.
    #    A C++ runtime (libstdc++, libgcc_s) or libm cost a host that does
    #    not load them itself ~1.3 MiB of RSS (docs/benchmarks.md "Fixed
    #    footprint"); lowtide takes what it needs from the host's own
    #    runtime (src/cxxrt.hpp).
    #    A sanitizer build (scripts/test's UBSan run) adds its runtime.
    needed = sorted(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run(["readelf", "-d", lib])))
    if [n for n in needed if not n.startswith("libubsan.")] != ["libc.so.6", "libmimalloc.so.2"]:
        failures.append("DT_NEEDED is %s, expected only libc.so.6 and libmimalloc.so.2" % needed)
    print("DT_NEEDED: " + ", ".join(needed))

    print("required allocation symbols: %d (libc+mimalloc family + %d operators)"
          % (len(required), len(OPERATORS)))
    print("lowtide exports: %d symbols, %d of them lowtide_*"
          % (len(mine), sum(1 for n in mine if n.startswith("lowtide_"))))
    if private:
        print("not required (GLIBC_PRIVATE, glibc-internal ABI): " + ", ".join(sorted(private)))
    allowed_extra = sorted(n for n in mine if FAMILY.match(n) and n not in required)
    if allowed_extra:
        print("also exported (allocation family, not in libc/mimalloc): " + ", ".join(allowed_extra))

    if failures:
        print("\nFAIL: %d problem(s):" % len(failures))
        for f in failures:
            print("  - " + f)
        return 1
    print("PASS: all %d allocation symbols exported unversioned; no extra exports"
          % len(required))
    return 0


if __name__ == "__main__":
    sys.exit(main())
