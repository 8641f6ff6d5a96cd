"""`lowtide doctor [-- CMD]`: what on this machine, and in CMD, matters to
lowtide, with a warning for each thing that will surprise.

The machine's settings are read from their files (under --sysroot in the
tests). What lowtide itself sees (that the library loads, its version, the
memory limit it applies) comes from the library: a probe process runs under
it and writes its JSON report, so nothing here re-implements the library's
rules. For CMD, the executable is looked at first (ELF: statically linked?
another architecture? setuid, setgid or file capabilities: secure mode?),
then CMD runs under lowtide with JSON reports to a private directory while
its process tree is sampled from /proc: a process that has libc mapped but
not liblowtide ran without lowtide, and each report says how many calls
lowtide served in its process."""
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

from . import preload
from .units import printable

SAMPLE_S = 0.05
SHOWN = 8  # processes listed one by one; the rest summed up
# Dropped from the environment of the processes doctor starts, as run's
# and compare's (preload.lowtide_env) drop them.
NOT_INHERITED = preload.NOT_INHERITED


class Doctor:
    def __init__(self):
        self.warnings = 0

    # printable(): thread names (comm) and what the command wrote are
    # the command's own choice.
    def info(self, key, text):
        print(printable("  %-24s %s" % (key, text)))

    def warn(self, text):
        self.warnings += 1
        print(printable("warning: " + text))


def read_text(sysroot, path):
    try:
        with open(os.path.join(sysroot, path.lstrip("/"))) as f:
            return f.read().strip()
    except OSError:
        return None


def short(text, width=70):
    """A command line on one line: control characters escaped, cut to width."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= width else text[:width - 3] + "..."


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0
    return str(n)


# ---------------------------------------------------------------- the machine

def thp(d, sysroot):
    text = read_text(sysroot, "/sys/kernel/mm/transparent_hugepage/enabled")
    if text is None:
        d.info("transparent huge pages", "unknown (no /sys/kernel/mm/transparent_hugepage/enabled)")
        return
    mode = text[text.find("[") + 1:text.find("]")] if "[" in text and "]" in text else text
    meaning = {
        "always": "the kernel may back any block of 2 MiB and more with huge pages (lowtide aligns those "
                  "blocks to 2 MiB): faster when written in full, but a block touched sparsely holds "
                  "2 MiB per region touched",
        "madvise": "huge pages only where a program asks (numpy does for arrays of 4 MiB and more; "
                   "LOWTIDE_HUGEPAGES=advise makes lowtide ask for its blocks of 2 MiB and more)",
        "never": "no huge pages; LOWTIDE_HUGEPAGES=advise has no effect",
    }.get(mode, "unrecognised mode")
    d.info("transparent huge pages", "%s: %s" % (mode, meaning))


def overcommit(d, sysroot):
    text = read_text(sysroot, "/proc/sys/vm/overcommit_memory")
    meaning = {
        "0": "heuristic: one request larger than RAM + swap fails with ENOMEM, as under glibc",
        "1": "always: nothing is refused; an oversized allocation succeeds and the OOM killer decides later",
        "2": "strict: every block written counts against CommitLimit (/proc/meminfo); malloc returns "
             "NULL once it is reached, long before memory runs out (as under glibc)",
    }.get(text)
    if meaning is None:
        d.info("vm.overcommit_memory", "unknown (%r)" % text)
    else:
        d.info("vm.overcommit_memory", "%s (%s)" % (text, meaning))


def max_map_count(d, sysroot):
    text = read_text(sysroot, "/proc/sys/vm/max_map_count")
    try:
        n = int(text)
    except (TypeError, ValueError):
        d.info("vm.max_map_count", "unknown (%r)" % text)
        return
    d.info("vm.max_map_count", "%d: each large block lowtide holds is a mapping of its own (two with the "
                               "reserved space it splits); past about %d live large blocks frees and "
                               "commits fall back to mprotect (slower, never failing)" % (n, n // 2))


def probe(lib, sysroot):
    """Run a small program under the library with a JSON report; returns
    (report dict or None, stderr text)."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED + ("LOWTIDE_STATS", "LOWTIDE_STATS_FILE", "LD_PRELOAD")}
    env["LD_PRELOAD"] = lib
    env["LOWTIDE_STATS"] = "json"
    if sysroot != "/":
        env["LOWTIDE_CGROUP_ROOT"] = sysroot
    with tempfile.TemporaryDirectory(prefix="lowtide-doctor-") as tmp:
        # LOWTIDE_STATS_FILE is a pattern: a "%" of the directory's own
        # ($TMPDIR's) doubled, or lowtide would write elsewhere.
        env["LOWTIDE_STATS_FILE"] = os.path.join(tmp.replace("%", "%%"), "probe.json")
        prog = preload.probe_program()
        try:
            p = subprocess.run([prog], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=60)
            err = p.stderr.decode(errors="replace").strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, str(e)
        try:
            with open(os.path.join(tmp, "probe.json")) as f:
                return json.load(f), err
        except (OSError, ValueError):
            return None, err


def machine(d, lib, version, sysroot):
    print("lowtide doctor")
    d.info("lowtide", "%s (%s)" % (version or "version unknown", lib))
    rep, err = probe(lib, sysroot)
    if rep is None:
        d.warn("the library does not work here: a probe process under LD_PRELOAD=%s wrote no report%s"
               % (lib, (": " + err) if err else ""))
    else:
        d.info("library", "loads and serves malloc (a probe process under it wrote its report)")
        if version and rep.get("version") != version:
            d.warn("the library is version %s, this command %s: reinstall one of them" % (rep.get("version"), version))
        for line in err.splitlines():
            if line.startswith("lowtide: warning:"):
                d.warn("the library says: " + line[len("lowtide: warning:"):].strip())
    thp(d, sysroot)
    overcommit(d, sysroot)
    max_map_count(d, sysroot)
    if rep is not None:
        proc = rep.get("process", {})
        limit, source = proc.get("limit", 0), proc.get("limit_source", "none")
        if limit:
            where = {"env": "LOWTIDE_LIMIT", "cgroup_v2": "cgroup v2 memory.max/memory.high",
                     "cgroup_v1": "cgroup v1 memory.limit_in_bytes"}.get(source, source)
            d.info("memory limit", "%s (from %s): lowtide caches nothing near it and gives memory back "
                                   "above it" % (human(limit), where))
        else:
            d.info("memory limit", "none (no LOWTIDE_LIMIT, and no cgroup limit over this process)")
        cap = proc.get("cache_cap")
        if cap == 0:
            d.info("reuse cache", "off (LOWTIDE_CACHE=0): every freed large block goes back to the OS at free")
        elif cap is not None:
            # The library reads the word in any case and around spaces, and
            # falls back to it (with a warning) for a value it rejects.
            given = os.environ.get("LOWTIDE_CACHE", "auto").strip().lower()
            rejected = any(ln.startswith("lowtide: warning: LOWTIDE_CACHE=") for ln in err.splitlines())
            how = ("LOWTIDE_CACHE=auto: a sixteenth of this machine's RAM, at most 256 MiB"
                   if given == "auto" or rejected else "LOWTIDE_CACHE")
            d.info("reuse cache", "up to %s of freed large blocks kept for reuse (%s)" % (human(cap), how))
    else:
        d.info("memory limit", "unknown (the library did not run)")
    environment(d)


def environment(d):
    mine = sorted(k for k in os.environ if k.startswith("LOWTIDE_"))
    d.info("LOWTIDE_* set", ", ".join("%s=%s" % (k, os.environ[k]) for k in mine) if mine else "none")
    if os.environ.get("LD_PRELOAD"):
        d.info("LD_PRELOAD", os.environ["LD_PRELOAD"] + " (lowtide run puts lowtide first and keeps these)")
    sf = os.environ.get("LOWTIDE_STATS_FILE")
    if sf and "%p" not in sf:
        d.warn("LOWTIDE_STATS_FILE=%s has no %%p: every process of a process tree (children, or programs "
               "exec'd by a shell, env or timeout) writes that one file, and only the last report "
               "survives; put %%p (the pid) in the name" % sf)


# ---------------------------------------------------------------- the command

PT_DYNAMIC, PT_INTERP = 2, 3


def elf_info(path):
    """(class, machine, interpreter or None, has_dynamic) of an ELF file,
    or None if it is not ELF."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 52 or head[:4] != b"\x7fELF":
                return None
            cls, data = head[4], head[5]
            end = "<" if data == 1 else ">"
            machine = struct.unpack_from(end + "H", head, 18)[0]
            if cls == 2:
                phoff, = struct.unpack_from(end + "Q", head, 32)
                phentsize, phnum = struct.unpack_from(end + "HH", head, 54)
            else:
                phoff, = struct.unpack_from(end + "I", head, 28)
                phentsize, phnum = struct.unpack_from(end + "HH", head, 42)
            interp, dynamic = None, False
            for i in range(phnum):
                f.seek(phoff + i * phentsize)
                ph = f.read(phentsize)
                if len(ph) < 32:
                    break
                ptype, = struct.unpack_from(end + "I", ph, 0)
                if ptype == PT_DYNAMIC:
                    dynamic = True
                elif ptype == PT_INTERP:
                    if cls == 2:
                        off, = struct.unpack_from(end + "Q", ph, 8)
                        size, = struct.unpack_from(end + "Q", ph, 32)
                    else:
                        off, = struct.unpack_from(end + "I", ph, 4)
                        size, = struct.unpack_from(end + "I", ph, 16)
                    f.seek(off)
                    interp = f.read(min(size, 4096)).rstrip(b"\0").decode(errors="replace")
            return cls, machine, interp, dynamic
    except OSError:
        return None


def shebang(path):
    """The interpreter and its argument of a #! script, or None."""
    try:
        with open(path, "rb") as f:
            line = f.readline(256)
    except OSError:
        return None
    if not line.startswith(b"#!"):
        return None
    parts = line[2:].decode(errors="replace").strip().split(None, 1)
    return (parts[0], parts[1] if len(parts) > 1 else None) if parts else None


def secure_reasons(path):
    """Why the kernel would start path in secure mode (AT_SECURE) for this
    user: the set-user-ID or set-group-ID bit giving another identity, or
    file capabilities; [] if none. A nosuid mount makes the kernel ignore
    all three."""
    try:
        st = os.stat(path)
        if os.statvfs(path).f_flag & os.ST_NOSUID:
            return []
    except OSError:
        return []
    out = []
    if st.st_mode & stat.S_ISUID and st.st_uid != os.getuid():
        out.append("set-user-ID (owner uid %d)" % st.st_uid)
    if st.st_mode & stat.S_ISGID and st.st_mode & stat.S_IXGRP and st.st_gid != os.getgid():
        out.append("set-group-ID (group gid %d)" % st.st_gid)
    try:
        if os.getxattr(path, "security.capability"):
            out.append("file capabilities")
    except OSError:
        pass
    return out


def look_at(d, exe, lib_elf, argv0, depth=0):
    """Warnings about the executable itself; True if lowtide can be loaded
    into it as far as the file shows."""
    sb = shebang(exe)
    if sb is not None:
        interp, arg = sb
        if depth > 0:
            d.info("interpreter", "%s is a script itself" % exe)
            return True
        d.info("command", "%s: a script for %s%s" % (exe, interp, (" " + arg) if arg else ""))
        target = interp
        if os.path.basename(interp) == "env" and arg:
            name = [a for a in arg.split() if not a.startswith("-") and "=" not in a]
            found = shutil.which(name[0]) if name else None
            if found:
                target = found
        if not os.path.isfile(target):
            d.warn("the interpreter %s of %s does not exist" % (target, exe))
            return False
        return look_at(d, os.path.realpath(target), lib_elf, target, depth + 1)
    info = elf_info(exe)
    label = "command" if depth == 0 else "interpreter"
    if info is None:
        d.info(label, "%s: neither ELF nor a #! script" % exe)
        return True
    cls, machine, interp, dynamic = info
    ok = True
    if lib_elf is not None and (cls, machine) != lib_elf[:2]:
        d.warn("%s is built for another architecture (ELF class %d, machine %d; liblowtide.so: class %d, "
               "machine %d): the loader skips the library (\"wrong ELF class\") and lowtide is not used"
               % (argv0, cls, machine, lib_elf[0], lib_elf[1]))
        ok = False
    if interp is None:
        d.warn("%s is statically linked (no program interpreter%s): no dynamic loader runs, so LD_PRELOAD "
               "has no effect and it keeps the malloc linked into it; lowtide cannot serve it"
               % (argv0, ", a static PIE" if dynamic else ""))
        ok = False
    else:
        d.info(label, "%s: dynamically linked (loader %s)" % (exe, interp))
    secure = secure_reasons(exe)
    if secure:
        d.warn("%s runs in secure mode (AT_SECURE) for you: %s. The loader ignores LD_PRELOAD paths "
               "with a slash, so lowtide is not loaded; loaded from a system directory it would ignore "
               "every LOWTIDE_* variable and write no report" % (argv0, ", ".join(secure)))
        ok = False
    return ok


def proc_children(pid):
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def sample(pid, seen):
    """Record for pid and its descendants, per (pid, exe): whether libc and
    liblowtide were mapped. ld.so maps LD_PRELOAD objects before the
    program's own libraries, so libc without liblowtide means the process
    runs without lowtide; neither may be a static program or a process
    caught between exec and its libraries."""
    stack, done = [pid], set()
    while stack:
        p = stack.pop()
        if p in done:
            continue
        done.add(p)
        stack += proc_children(p)
        try:
            exe = os.readlink("/proc/%d/exe" % p)
            rec = seen.get((p, exe))
            if rec is not None and (rec["libc"] or rec["lowtide"]):
                continue  # decided: its maps need not be read again
            # errors="replace": a path in maps, and comm, need not be UTF-8.
            with open("/proc/%d/maps" % p, errors="replace") as f:
                maps = f.read()
            with open("/proc/%d/comm" % p, errors="replace") as f:
                comm = f.read().strip()
        except OSError:
            continue
        rec = seen.setdefault((p, exe), {"comm": comm, "libc": False, "lowtide": False})
        rec["libc"] |= "/libc.so" in maps or "/libc-" in maps
        rec["lowtide"] |= "liblowtide" in maps


def run_command(d, lib, command, timeout):
    """Run command under lowtide; returns (reports, seen, status)."""
    tmp = tempfile.mkdtemp(prefix="lowtide-doctor-")
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env["LD_PRELOAD"] = preload.prepend_preload(lib, os.environ.get("LD_PRELOAD"))
    env["LOWTIDE_STATS"] = "json"
    env["LOWTIDE_STATS_FILE"] = os.path.join(tmp.replace("%", "%%"), "doctor.%p.json")
    print("running %s under lowtide (reports to %s)" % (short(" ".join(command)), tmp), flush=True)
    seen = {}
    said = []
    try:
        child = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        d.warn("cannot start %s: %s" % (command[0], e))
        return [], seen, None, said
    # CMD's stderr goes on to ours as it comes; the lines lowtide wrote there
    # (its warnings: a setting refused, forwarding to another allocator) are
    # kept for the verdict.
    tee = threading.Thread(target=pass_stderr, args=(child.stderr, said), daemon=True)
    tee.start()
    # Ctrl-C reaches CMD (same process group); the doctor waits for it and
    # reports on what it did.
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    start = time.monotonic()
    stopped = False
    try:
        while child.poll() is None:
            sample(child.pid, seen)
            if timeout is not None and not stopped and time.monotonic() - start >= timeout:
                stopped = True
                child.terminate()
                try:
                    child.wait(5)
                except subprocess.TimeoutExpired:
                    child.kill()
            time.sleep(SAMPLE_S)
        status = child.wait()
    finally:
        signal.signal(signal.SIGINT, old)
    # A grandchild may still hold the pipe open: wait a little, not for it.
    tee.join(2)
    reports = []
    for name in sorted(os.listdir(tmp)):
        try:
            with open(os.path.join(tmp, name)) as f:
                reports.append(json.load(f))
        except (OSError, ValueError):
            pass
    shutil.rmtree(tmp, ignore_errors=True)
    if stopped:
        print("stopped it after %g s (--timeout)" % timeout)
    return reports, seen, status, said


def pass_stderr(pipe, said):
    out = getattr(sys.stderr, "buffer", None)
    for line in iter(pipe.readline, b""):
        if line.startswith(b"lowtide: ") or b"ld.so: object" in line:
            said.append(line.decode(errors="replace").strip())
        if out is not None:
            out.write(line)
            out.flush()
    pipe.close()


def verdict(d, command, reports, seen, status, said, file_ok):
    served = 0
    rest = 0
    print()
    for line in dict.fromkeys(said):  # each once, in order
        d.warn("%s wrote: %s" % (command[0], line))
    for i, r in enumerate(sorted(reports, key=lambda r: r.get("pid", 0))):
        calls = r.get("totals", {}).get("calls", {})
        n = sum(v for k, v in calls.items() if k != "free")
        served += n > 0
        if n == 0:
            d.warn("pid %d (%s) had lowtide loaded but made no malloc call through it: it allocates nothing, "
                   "or another way (its own allocator, or a malloc linked into it)"
                   % (r.get("pid", 0), short(r.get("command", "?"))))
        elif i < SHOWN:
            d.info("pid %d" % r.get("pid", 0), "%s: lowtide served %d malloc/calloc/realloc/aligned calls, "
                                              "peak RSS %s" % (short(r.get("command", "?")), n,
                                                               human(r.get("process", {}).get("peak_rss", 0))))
        else:
            rest += 1
    if rest:
        d.info("...", "and %d more processes served by lowtide" % rest)
    reported = {r.get("pid") for r in reports}
    without = sorted({(p, rec["comm"]) for (p, exe), rec in seen.items() if rec["libc"] and not rec["lowtide"]})
    for pid, comm in without:
        d.warn("pid %d (%s) ran without lowtide: libc was mapped but not liblowtide (it cleared LD_PRELOAD, "
               "or ran in secure mode, or the loader refused the library)" % (pid, comm))
    loaded_silent = sorted({(p, rec["comm"]) for (p, exe), rec in seen.items()
                            if rec["lowtide"] and p not in reported})
    for pid, comm in loaded_silent:
        if not any(p == pid and not rec["lowtide"] for (p, exe), rec in seen.items()):
            d.warn("pid %d (%s) had lowtide loaded but wrote no report: it ended without exit handlers "
                   "(killed by a signal, _exit, or still running when stopped)" % (pid, comm))
    if status is not None:
        how = ("exit status %d" % status) if status >= 0 else ("killed by signal %d" % -status)
        d.info("command ended", how)
    sf = os.environ.get("LOWTIDE_STATS_FILE")
    if len(reports) > 1 and sf and "%p" not in sf:
        d.warn("%d processes of this command ran under lowtide: with your LOWTIDE_STATS_FILE=%s each "
               "would overwrite the last report; put %%p in the name" % (len(reports), sf))
    if served:
        print("lowtide is in use in %s: it served malloc in %d process%s"
              % (command[0], served, "" if served == 1 else "es"))
    else:
        print("lowtide is NOT in use in %s%s" % (command[0], "" if file_ok else " (see the warnings above)"))
        if file_ok and not reports:
            d.warn("no process of %s wrote a report under lowtide" % command[0])


def main(lib, command, version=None, timeout=None, sysroot="/"):
    d = Doctor()
    machine(d, lib, version, sysroot)
    if command:
        print()
        exe = command[0] if "/" in command[0] else shutil.which(command[0])
        if exe is None or not os.path.isfile(exe):
            d.warn("%s: command not found" % command[0])
        else:
            lib_info = elf_info(lib)
            file_ok = look_at(d, os.path.realpath(exe), lib_info, command[0])
            reports, seen, status, said = run_command(d, lib, command, timeout)
            verdict(d, command, reports, seen, status, said, file_ok)
    print()
    if d.warnings:
        print("lowtide doctor: %d warning%s" % (d.warnings, "" if d.warnings == 1 else "s"))
        return 1
    print("lowtide doctor: nothing to warn about")
    return 0
