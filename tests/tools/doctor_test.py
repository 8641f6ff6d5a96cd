"""`lowtide doctor`, one case per meson test:

  doctor_test.py CASE LAUNCHER BUILD_DIR

Each case crafts what doctor must notice and checks what it says:
  machine   THP mode, overcommit, vm.max_map_count and the cgroup limit (as
            the library finds it) from two fake trees (--sysroot), and the
            real machine: exit 0, nothing to warn about
  stats_file  LOWTIDE_STATS_FILE without %p: a warning; with %p none; a
            command of two processes under the first: how many reports
            would overwrite each other
  in_use    a program under lowtide, forking one child: both processes'
            reports, calls served, exit 0
  static    a program linked with gcc -static: the warning, not in use
  setuid    a set-user-ID copy owned by nobody (needs root): secure mode,
            the process ran without lowtide
  cleared   a child exec'd with LD_PRELOAD removed: ran without lowtide
  no_malloc a program with a malloc of its own: lowtide loaded, no call
  timeout   a command stopped by --timeout: loaded, no report
  nonutf8   a program whose file name is not UTF-8 (in its /proc/PID/maps
            and comm): served, no traceback"""
import os
import shutil
import stat
import sys
import tempfile

from tools_common import check, clean_env, finish, run

case, launcher, build = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
lib = os.path.realpath(os.path.join(build, "src", "liblowtide.so"))
env = clean_env(LOWTIDE_BUILD_DIR=build)


def doctor(args, e=None, timeout=120):
    rc, out, err = run([launcher, "doctor"] + args, e or env, timeout=timeout)
    print(out, err, sep="\n")
    return rc, out, err


def warnings(out):
    return [line for line in out.splitlines() if line.startswith("warning: ")]


def compile_c(tmp, name, code, flags=()):
    src = os.path.join(tmp, name + ".c")
    with open(src, "w") as f:
        f.write(code)
    exe = os.path.join(tmp, name)
    rc, out, err = run(["cc", "-O1", "-o", exe, src] + list(flags), env, timeout=120)
    check(rc == 0, "cc %s: %s" % (name, err))
    return exe


MALLOC_PROGRAM = ("#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n"
                  "int main(int argc, char** argv) {\n"
                  "  char* volatile p = malloc(1 << 20); p[0] = 1; free(p);\n"
                  "  if (argc > 1) sleep(atoi(argv[1]));\n  puts(\"ran\");\n  return 0;\n}\n")


def fake_tree(root, thp, overcommit, maps, limit):
    files = {
        "sys/kernel/mm/transparent_hugepage/enabled": thp,
        "proc/sys/vm/overcommit_memory": overcommit,
        "proc/sys/vm/max_map_count": maps,
        "proc/self/cgroup": "0::/job\n",
        "proc/self/mountinfo": "30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n",
        "sys/fs/cgroup/job/memory.max": limit,
        "sys/fs/cgroup/job/memory.high": "max\n",
    }
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def case_machine(tmp):
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    fake_tree(a, "always madvise [never]\n", "2\n", "1000\n", "268435456\n")
    fake_tree(b, "[always] madvise never\n", "1\n", "262144\n", "max\n")
    rc, out, err = doctor(["--sysroot", a])
    check("transparent huge pages   never:" in out, "THP never from tree a")
    check("vm.overcommit_memory     2 (strict" in out, "overcommit 2 from tree a")
    check("vm.max_map_count         1000:" in out and "about 500 live" in out, "max_map_count 1000 from tree a")
    check("memory limit             256.0 MiB (from cgroup v2" in out, "the cgroup's 256 MiB, as the library sees it")
    rc, out, err = doctor(["--sysroot", b])
    check("transparent huge pages   always:" in out, "THP always from tree b")
    check("vm.overcommit_memory     1 (always" in out, "overcommit 1 from tree b")
    check("vm.max_map_count         262144:" in out, "max_map_count from tree b")
    check("memory limit             none" in out, "memory.max 'max': no limit")
    rc, out, err = doctor(["--sysroot", b], clean_env(LOWTIDE_BUILD_DIR=build, LOWTIDE_LIMIT="1G"))
    check("memory limit             1.0 GiB (from LOWTIDE_LIMIT)" in out, "LOWTIDE_LIMIT shown as the library applies it")
    rc, out, err = doctor(["--sysroot", b], clean_env(LOWTIDE_BUILD_DIR=build, LOWTIDE_CACHE="96M"))
    check("reuse cache              up to 96.0 MiB of freed large blocks kept for reuse (LOWTIDE_CACHE)" in out,
          "LOWTIDE_CACHE's cap as the library applies it: %r" % [ln for ln in out.splitlines() if "reuse" in ln])
    for value in ("AUTO", "lots"):  # the word in any case, and the default a rejected value falls back to
        rc, out, err = doctor(["--sysroot", b], clean_env(LOWTIDE_BUILD_DIR=build, LOWTIDE_CACHE=value))
        check("of freed large blocks kept for reuse (LOWTIDE_CACHE=auto:" in out,
              "LOWTIDE_CACHE=%s read as auto: %r" % (value, [ln for ln in out.splitlines() if "reuse" in ln]))
    rc, out, err = doctor(["--sysroot", b], clean_env(LOWTIDE_BUILD_DIR=build, LOWTIDE_CACHE="0"))
    check("reuse cache              off (LOWTIDE_CACHE=0)" in out, "LOWTIDE_CACHE=0: the cache off")
    # This machine, as it is: the library loads, nothing to warn about.
    rc, out, err = doctor([])
    check(rc == 0 and "library                  loads" in out and not warnings(out)
          and out.rstrip().endswith("lowtide doctor: nothing to warn about"), "the real machine: rc %d" % rc)
    check(("lowtide                  " + lib) not in out and lib in out, "the library's path shown")
    # A library that does not load: a warning and exit 1.
    broken = os.path.join(tmp, "broken")
    os.makedirs(os.path.join(broken, "src"))
    with open(os.path.join(broken, "src", "liblowtide.so"), "w") as f:
        f.write("not ELF\n")
    rc, out, err = doctor([], clean_env(LOWTIDE_BUILD_DIR=broken))
    check(rc == 1 and any("does not work here" in w for w in warnings(out)), "a broken library: rc %d" % rc)


def case_stats_file(tmp):
    e = clean_env(LOWTIDE_BUILD_DIR=build, LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json"))
    rc, out, err = doctor([], e)
    check(rc == 1 and any("has no %p" in w for w in warnings(out)), "no %%p: warned, rc %d" % rc)
    e2 = clean_env(LOWTIDE_BUILD_DIR=build, LOWTIDE_STATS_FILE=os.path.join(tmp, "r.%p.json"))
    rc, out, err = doctor([], e2)
    check(rc == 0 and not warnings(out), "with %%p: no warning, rc %d" % rc)
    rc, out, err = doctor(["--", "/bin/sh", "-c", "/bin/true; /bin/true"], e)
    check(any("2 processes of this command" in w or "3 processes of this command" in w for w in warnings(out)),
          "a process tree under a file without %p: the reports that would be lost counted")
    check(not os.path.exists(os.path.join(tmp, "r.json")), "doctor's own reports do not go to the user's file")
    # Run from a shell under `lowtide run --stats ...`: the marker of that
    # report's owner is inherited, and the probe (before: a child of that
    # owner, so no report without %p) must still write its own.
    # A $TMPDIR with "%p" in its name: doctor's reports are written there all
    # the same (before: lowtide expanded it, "does not work here").
    # A program that allocates: /bin/true makes no malloc call, and since
    # lowtide's own start no longer counts as the program's (reliability.md
    # no. 125) doctor rightly warns that it made none.
    odd_tmp = os.path.join(tmp, "t%p")
    os.mkdir(odd_tmp)
    prog = compile_c(tmp, "prog", MALLOC_PROGRAM)
    rc, out, err = doctor(["--", prog], clean_env(LOWTIDE_BUILD_DIR=build, TMPDIR=odd_tmp))
    check(rc == 0 and not warnings(out) and "lowtide is in use in %s" % prog in out,
          "TMPDIR with %%p: rc %d %r" % (rc, warnings(out)))
    rc, out, err = doctor([], clean_env(LOWTIDE_BUILD_DIR=build, LOWTIDE_OWNER_PID="1"))
    check(rc == 0 and not warnings(out) and "library                  loads" in out,
          "an inherited LOWTIDE_OWNER_PID: the probe still reports, rc %d %r" % (rc, warnings(out)))


def case_in_use(tmp):
    rc, out, err = doctor(["--", "/usr/bin/python3", "-c",
                           "import os\nb = bytearray(8 << 20)\npid = os.fork()\n"
                           "if pid == 0:\n    c = bytearray(4 << 20)\nelse:\n    os.waitpid(pid, 0)"])
    pids = [line for line in out.splitlines() if line.startswith("  pid ") and "lowtide served" in line]
    check(rc == 0 and not warnings(out), "in use: rc %d, no warning" % rc)
    check(len(pids) == 2, "both processes reported: %r" % pids)
    check("lowtide is in use in /usr/bin/python3: it served malloc in 2 processes" in out, "the verdict")
    check("command                  /usr/bin/python3" in out and "dynamically linked" in out, "the file looked at")


def case_static(tmp):
    libc_a = [p for p in ("/usr/lib/x86_64-linux-gnu/libc.a", "/usr/lib/aarch64-linux-gnu/libc.a", "/usr/lib/libc.a")
              if os.path.exists(p)]
    if not libc_a:
        print("SKIP: no libc.a (libc6-dev) to link a static program")
        sys.exit(77)
    exe = compile_c(tmp, "static_prog", MALLOC_PROGRAM, ["-static"])
    rc, out, err = doctor(["--", exe])
    check(rc == 1 and any("statically linked" in w for w in warnings(out)), "static: warned, rc %d" % rc)
    check("lowtide is NOT in use" in out and "ran" in out, "static: not in use, and it ran")
    dyn = compile_c(tmp, "dyn_prog", MALLOC_PROGRAM)
    rc, out, err = doctor(["--", dyn])
    check(rc == 0 and not any("statically" in w for w in warnings(out)), "the same program linked dynamically: fine")


def case_setuid(tmp):
    if os.getuid() != 0:
        print("SKIP: making a set-user-ID program owned by another user needs root")
        sys.exit(77)
    exe = compile_c(tmp, "suid_prog", MALLOC_PROGRAM)
    os.chmod(tmp, 0o755)
    os.chown(exe, 65534, 65534)
    os.chmod(exe, 0o4755 | stat.S_IXGRP)
    rc, out, err = doctor(["--", exe, "2"])
    check(rc == 1 and any("secure mode" in w and "set-user-ID" in w for w in warnings(out)),
          "setuid: secure mode warned, rc %d" % rc)
    check(any("ran without lowtide" in w for w in warnings(out)), "setuid: the process ran without lowtide")
    check("lowtide is NOT in use" in out, "setuid: not in use")
    # Owned by the user who runs it: no secure mode, lowtide in use.
    own = os.path.join(tmp, "own_prog")
    shutil.copy(exe, own)
    os.chmod(own, 0o4755)
    rc, out, err = doctor(["--", own])
    check(rc == 0 and "lowtide is in use" in out, "a set-user-ID program of one's own: in use, rc %d" % rc)


def case_cleared(tmp):
    rc, out, err = doctor(["--", "/bin/sh", "-c", "exec env -u LD_PRELOAD /bin/sleep 2"])
    check(rc == 1 and any("ran without lowtide" in w and "sleep" in w for w in warnings(out)),
          "a child without LD_PRELOAD found, rc %d" % rc)


# A program with a malloc of its own (as one linking jemalloc statically, or
# Go's runtime): the executable's definitions come first in symbol lookup,
# before any preloaded library, so libc's and its own calls never reach
# lowtide although it is loaded.
OWN_MALLOC = r"""
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static char* next;
static char* end;
void* malloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (next == NULL || (size_t)(end - next) < n) {
    size_t sz = n > (1 << 24) ? n : (1 << 24);
    void* p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { errno = ENOMEM; return NULL; }
    next = p; end = next + sz;
  }
  void* r = next; next += n; return r;
}
void free(void* p) { (void)p; }
void* calloc(size_t a, size_t b) { void* p = malloc(a * b); if (p) memset(p, 0, a * b); return p; }
void* realloc(void* p, size_t n) { void* q = malloc(n); if (q && p) memcpy(q, p, n); return q; }
int main(void) { char* volatile p = malloc(1 << 20); p[0] = 1; free(p); return write(1, "x\n", 2) != 2; }
"""


def case_no_malloc(tmp):
    exe = compile_c(tmp, "own_malloc", OWN_MALLOC)
    rc, out, err = doctor(["--", exe])
    # lowtide notices at start and forwards every call (src/forward.cpp):
    # its one warning, passed on as doctor's.
    check(rc == 1 and any("another allocator's malloc comes first" in w for w in warnings(out)),
          "a program with its own malloc: lowtide's own warning passed on, rc %d" % rc)
    check("lowtide is NOT in use" in out, "a program with its own malloc: not in use")


def case_timeout(tmp):
    rc, out, err = doctor(["--timeout", "1", "--", "/bin/sleep", "60"], timeout=50)
    check("stopped it after 1 s" in out and "killed by signal 15" in out, "stopped by --timeout")
    # SIGTERM under the default action: lowtide's handler writes the report,
    # then the process dies by the signal (docs/report.md, "Ended by a
    # signal"), so doctor sees a report and nothing goes missing.
    check(rc == 0 and not any("loaded but wrote no report" in w for w in warnings(out))
          and "lowtide served" in out,
          "stopped by SIGTERM: its report written all the same, rc %d" % rc)



def case_nonutf8(tmp):
    exe = compile_c(tmp, "prog", MALLOC_PROGRAM)
    odd = os.path.join(os.fsencode(tmp), b"prog-\xff")
    os.rename(exe, odd)
    rc, out, err = run([os.fsencode(launcher), b"doctor", b"--", odd, b"1"], env, timeout=120)
    print(out, err, sep="\n")
    check(rc == 0 and "Traceback" not in err and "lowtide is in use" in out and "lowtide served" in out,
          "a program named in Latin-1: served, rc %d" % rc)


cases = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}
with tempfile.TemporaryDirectory(prefix="lowtide-doctor-test-") as tmp:
    cases[case](tmp)
finish()
