"""The security suite's report cases (docs/security.md, items 2-4 and 9):
where the report may be written, what happens with fd 2 closed, out of
memory at exit, and JSON that parses with a strict parser whatever bytes the
command line, thread names or file names hold.

    report_test.py CASE --lib LIB --prog REPORT_PROG
"""
import argparse
import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from lttest import check, clean_env, finish, run  # noqa: E402


def strict_json(data, what):
    """Parses bytes as a report the way a strict reader would: UTF-8 with no
    invalid byte, then JSON. Returns the object, or None after a failed check."""
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        check(False, f"{what}: not UTF-8 ({e})")
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        check(False, f"{what}: not JSON ({e})")
        return None


def read(path):
    with open(path, "rb") as f:
        return f.read()


def case_predictable_tmp(a, tmp):
    """A symlink planted at the temporary name the report used before (the
    target's name + .tmp.<pid>) must not be followed: the victim is left as
    it was, and the report is still written."""
    victim = os.path.join(tmp, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    target = os.path.join(tmp, "report.json")
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=target)
    rc, out, err = run([a.prog, "plant", victim], env, 60, show_failure=True)
    check(rc == 0, f"exit status {rc}")
    check(read(victim) == b"precious\n", f"victim changed: {read(victim)[:80]!r}")
    check(os.path.isfile(target) and not os.path.islink(target), "report is a regular file")
    r = strict_json(read(target), "report") if os.path.isfile(target) else None
    check(r is not None and r.get("schema") == "lowtide-report", "report parses")
    check(stat.S_IMODE(os.stat(target).st_mode) == 0o600, f"mode {oct(os.stat(target).st_mode)} (want 0600)")
    leftovers = [n for n in os.listdir(tmp) if n.startswith(".lowtide-")]
    check(leftovers == [], f"temporary files left: {leftovers}")


def run_and_drain(a, env, reader):
    """Runs the report program and returns its (rc, err) and what reached
    the FIFO open at `reader` (non-blocking) meanwhile."""
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
    try:
        got = os.read(reader, 1 << 20)
    except BlockingIOError:
        got = b""
    return rc, err, got


def case_sticky_symlink(a, tmp):
    """In a sticky world-writable directory (like /tmp), a symlink at the
    report's final name that belongs to another user is not followed (the
    kernel's fs.protected_symlinks rule): here it points to a FIFO, which
    must receive nothing; the report goes to stderr with a warning."""
    if os.geteuid() != 0:
        print("SKIP: needs root to make a symlink owned by another user")
        sys.exit(77)
    shared = os.path.join(tmp, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o1777)
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    link = os.path.join(shared, "report.json")
    os.symlink(fifo, link)
    os.lchown(link, 65534, 65534)  # nobody
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=link)
    rc, err, got = run_and_drain(a, env, reader)
    check(rc == 0, f"exit status {rc}")
    os.close(reader)
    check(got == b"", f"{len(got)} bytes went through another user's symlink into the FIFO")
    check("symlink of another user" in err, f"a warning names the reason: {err[:300]!r}")
    check('"schema": "lowtide-report"' in err, "the report went to stderr instead")
    check(os.path.islink(link), "the other user's symlink is left alone")
    # The same link owned by us is followed (the FIFO gets the report).
    os.lchown(link, 0, 0)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
    chunks = []
    while True:
        try:
            c = os.read(reader, 1 << 20)
        except BlockingIOError:
            break
        if not c:
            break
        chunks.append(c)
    os.close(reader)
    r = strict_json(b"".join(chunks), "report through our own link")
    check(r is not None and r.get("schema") == "lowtide-report", "our own link is followed")


def case_fifo_rules(a, tmp):
    """A FIFO at the report's final name (no link): another user's is not
    written (it could read the report, or never drain it and hold the
    exit); our own that nobody drains (its pipe full) holds the exit at
    most for a bounded time, then the report goes to stderr with a
    warning. The old code wrote into the first and hung on the second."""
    if os.geteuid() != 0:
        print("SKIP: needs root to make a FIFO owned by another user")
        sys.exit(77)
    fifo = os.path.join(tmp, "report.json")
    os.mkfifo(fifo, 0o666)
    os.chown(fifo, 65534, 65534)  # nobody's
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=fifo)
    rc, err, got = run_and_drain(a, env, reader)
    check(rc == 0, f"exit status {rc}")
    check(got == b"", f"{len(got)} bytes went into another user's FIFO")
    check('"schema": "lowtide-report"' in err, "the report went to stderr instead")
    # Our own FIFO, read by nobody and full: the exit must not hang.
    os.chown(fifo, 0, 0)
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        while True:
            os.write(writer, b"x" * 65536)
    except BlockingIOError:
        pass
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
    os.close(writer)
    os.close(reader)
    check(rc == 0, f"exit status {rc} with a full FIFO at the report's name")
    check("cannot write the report" in err and '"schema": "lowtide-report"' in err,
          f"a warning and the report on stderr: {err[:300]!r}")


def case_link_rules(a, tmp):
    """Outside sticky directories too: another user's symlink is not
    followed (the target, here a FIFO, receives nothing), and even our own
    link to a regular file is not written through (the file keeps its
    bytes, the link stays); both times the report goes to stderr."""
    if os.geteuid() != 0:
        print("SKIP: needs root to make a symlink owned by another user")
        sys.exit(77)
    plain = os.path.join(tmp, "plain")  # 0755, not sticky
    os.mkdir(plain)
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    theirs = os.path.join(plain, "theirs.json")
    os.symlink(fifo, theirs)
    os.lchown(theirs, 65534, 65534)
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=theirs)
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
    try:
        got = os.read(reader, 1 << 20)
    except BlockingIOError:
        got = b""
    os.close(reader)
    check(rc == 0 and got == b"", f"another user's link outside a sticky directory: {len(got)} bytes through it")
    check("symlink of another user" in err and '"schema": "lowtide-report"' in err, "warned, report on stderr")
    victim = os.path.join(tmp, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    ours = os.path.join(plain, "ours.json")
    os.symlink(victim, ours)
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=ours)
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
    check(rc == 0 and read(victim) == b"precious\n", f"our link to a regular file not written through: {read(victim)[:60]!r}")
    check(os.path.islink(ours) and os.readlink(ours) == victim, "the link is left as it was")
    check('"schema": "lowtide-report"' in err, "the report went to stderr")


def case_dir_link(a, tmp):
    """The rule for a link at the final name holds for every link on the
    way to it: a path through another user's symlinked directory is not
    followed (nothing is created where the link points; the old code wrote
    the report there and would have replaced any file of that name), while
    our own links, relative ones and ones through "..", and links inside
    them, are; a path that goes through another user's link only inside
    our own link's target is refused too."""
    if os.geteuid() != 0:
        print("SKIP: needs root to make a symlink owned by another user")
        sys.exit(77)
    plain = os.path.join(tmp, "plain")  # 0755, root's, not sticky
    real = os.path.join(tmp, "real")
    os.mkdir(plain)
    os.mkdir(real)
    theirs = os.path.join(plain, "theirs")
    os.symlink(real, theirs)
    os.lchown(theirs, 65534, 65534)  # nobody's link to our directory
    victim = os.path.join(real, "report.json")
    with open(victim, "w") as f:
        f.write("precious\n")
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=os.path.join(theirs, "report.json"))
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
    check(rc == 0, f"exit status {rc}")
    check(read(victim) == b"precious\n", f"the file behind another user's directory link was replaced: {read(victim)[:60]!r}")
    check(sorted(os.listdir(real)) == ["report.json"], f"files made behind the link: {os.listdir(real)}")
    check("symlink of another user in its directory path" in err, f"a warning names the reason: {err[:300]!r}")
    check('"schema": "lowtide-report"' in err, "the report went to stderr instead")
    # Ours (relative, through ".."), then a link of ours inside it: followed.
    os.unlink(victim)
    os.symlink("../real", os.path.join(plain, "mine"))
    os.symlink(".", os.path.join(real, "here"))
    path = os.path.join(plain, "mine", "here", "..", "real", "report.json")
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=path)
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
    check(rc == 0, f"exit status {rc}")
    r = strict_json(read(victim), "report through our own links") if os.path.isfile(victim) else None
    check(r is not None and r.get("schema") == "lowtide-report", f"our own directory links are followed: {err[:300]!r}")
    check(sorted(os.listdir(real)) == ["here", "report.json"], f"no temporary file left: {os.listdir(real)}")
    # Our own link whose target goes through theirs: refused as well.
    os.unlink(victim)
    os.symlink(os.path.join(theirs, "."), os.path.join(plain, "via"))
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=os.path.join(plain, "via", "report.json"))
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
    check(rc == 0 and not os.path.exists(victim), f"a link of another user inside our link's target is followed: {os.listdir(real)}")
    check("symlink of another user in its directory path" in err, f"warned: {err[:300]!r}")
    # Our own link at the final name whose target goes through theirs to a
    # FIFO: the FIFO receives nothing (the target is walked by the same
    # rule; the kernel's walk would have followed their link).
    fifodir = os.path.join(tmp, "fifodir")
    os.mkdir(fifodir)
    fifo = os.path.join(fifodir, "fifo")
    os.mkfifo(fifo)
    os.unlink(theirs)
    os.symlink(fifodir, theirs)
    os.lchown(theirs, 65534, 65534)
    final = os.path.join(plain, "final.json")
    os.symlink(os.path.join(theirs, "fifo"), final)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=final)
    rc, err, got = run_and_drain(a, env, reader)
    check(rc == 0 and got == b"", f"our final link through their directory link: {len(got)} bytes reached the FIFO")
    check("symlink of another user in its directory path" in err, f"warned: {err[:300]!r}")
    # The same through a link of ours: followed.
    os.unlink(final)
    os.symlink("../fifodir/fifo", final)
    rc, err, got = run_and_drain(a, env, reader)
    os.close(reader)
    r = strict_json(got, "report through our own final link") if got else None
    check(r is not None and r.get("schema") == "lowtide-report", f"our own final link to a FIFO is followed: {err[:300]!r}")


def case_proc_links(a, tmp):
    """procfs's links are followed by the kernel, never by their text:
    /proc/self/fd/N/r.json with N a directory's fd writes into that
    directory; with that directory deleted, the report goes to stderr, not
    into a directory named as the link's text reads ("... (deleted)")."""
    real = os.path.join(tmp, "real")
    os.mkdir(real)
    dfd = os.open(real, os.O_RDONLY | os.O_DIRECTORY)
    path = f"/proc/self/fd/{dfd}/r.json"
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=path)
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True, pass_fds=(dfd,))
    got = os.path.join(real, "r.json")
    r = strict_json(read(got), "report through /proc/self/fd") if os.path.isfile(got) else None
    check(rc == 0 and r is not None and r.get("schema") == "lowtide-report", f"written through the fd: {err[:300]!r}")
    os.unlink(got)
    os.rmdir(real)
    decoy = real + " (deleted)"
    os.mkdir(decoy)
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True, pass_fds=(dfd,))
    os.close(dfd)
    check(rc == 0 and os.listdir(decoy) == [], f"the link's text was walked: {os.listdir(decoy)}")
    check('"schema": "lowtide-report"' in err, f"the report went to stderr: {err[:300]!r}")
    # Another process's cwd: where it leads is that process's choice (its
    # owner's, whoever the link shows as owner), so it is not followed.
    other = os.path.join(tmp, "other")
    os.mkdir(other)
    p = subprocess.Popen(["sleep", "60"], cwd=other)
    try:
        env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=f"/proc/{p.pid}/cwd/r.json")
        rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
    finally:
        p.kill()
        p.wait()
    check(rc == 0 and os.listdir(other) == [], f"another process's /proc/<pid>/cwd followed: {os.listdir(other)}")
    check("another process under /proc" in err or "symlink of another user" in err, f"warned: {err[:300]!r}")


def case_userns_dev_links(a, tmp):
    """In a user namespace the host's /dev/stdout and /dev/fd belong to an
    unmapped user (the overflow uid): our own link to /dev/stdout, and a
    path through /dev/fd/N, still reach what they name (as when the kernel
    followed them). Run as nobody in a namespace of its own, so that root's
    files show as the overflow uid there."""
    if os.geteuid() != 0:
        print("SKIP: needs root to run as nobody")
        sys.exit(77)
    os.chmod(tmp, 0o755)
    lib = os.path.join(tmp, "lib.so")
    shutil.copy(a.lib, lib)
    os.chmod(lib, 0o755)
    work = os.path.join(tmp, "work")
    os.mkdir(work)
    os.chown(work, 65534, 65534)
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "-Ur", "true"],
                           capture_output=True)
    if probe.returncode != 0:
        print(f"SKIP: no unprivileged user namespace here: {probe.stderr[:200]!r}")
        sys.exit(77)
    script = (f'cd {work} && ln -s /dev/stdout out && mkdir d && '
              f'LD_PRELOAD={lib} LOWTIDE_STATS=json LOWTIDE_STATS_FILE={work}/out /bin/true | cat > got1 && '
              f'ln -s /dev/fd/7 dfd && '
              f'LD_PRELOAD={lib} LOWTIDE_STATS=json LOWTIDE_STATS_FILE={work}/dfd/r.json /bin/true 7<d')
    env = clean_env(None)
    rc, out, err = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "-Ur",
                        "sh", "-c", script], env, 60, show_failure=True)
    check(rc == 0, f"exit status {rc}")
    got1 = os.path.join(work, "got1")
    r = strict_json(read(got1), "report through our link to /dev/stdout") if os.path.isfile(got1) else None
    check(r is not None and r.get("schema") == "lowtide-report", f"our link to /dev/stdout followed: {err[:300]!r}")
    got2 = os.path.join(work, "d", "r.json")
    r = strict_json(read(got2), "report through /dev/fd/7") if os.path.isfile(got2) else None
    check(r is not None and r.get("schema") == "lowtide-report", f"a path through our link to /dev/fd/7: {err[:300]!r}")


def case_dangling_link(a, tmp):
    """A symlink whose target does not exist (such as /dev/stderr with fd 2
    closed, which points to /proc/self/fd/2) is never replaced by a file."""
    link = os.path.join(tmp, "err")
    os.symlink("/proc/self/fd/2", link)
    env = clean_env(a.lib, LOWTIDE_STATS="text", LOWTIDE_STATS_FILE=link)
    rc, out, err = run(["/bin/sh", "-c", f'exec "{a.prog}" names 2>&-'], env, 60, show_failure=True)
    check(rc == 0, f"exit status {rc}")
    check(os.path.islink(link) and os.readlink(link) == "/proc/self/fd/2", "the symlink is left as it was")
    check([n for n in os.listdir(tmp) if n != "err"] == [], f"files made: {os.listdir(tmp)}")


def case_link_loops(a, tmp):
    """Links are followed at most 40 times in all, as the kernel does, in
    the directory part and at the final name together: a loop in either
    ends with ELOOP and the report on stderr, and so do 30 links on the way
    to the directory plus 15 at the final name, while 20 plus 15 are
    followed (to a dangling end: not created through)."""
    eloop = os.strerror(errno.ELOOP)
    os.symlink("loop", os.path.join(tmp, "loop"))
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=os.path.join(tmp, "loop", "report.json"))
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
    check(rc == 0 and '"schema": "lowtide-report"' in err and eloop in err, f"a directory link loop: exit {rc}, {err[:300]!r}")
    os.symlink("self.json", os.path.join(tmp, "self.json"))
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=os.path.join(tmp, "self.json"))
    rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
    check(rc == 0 and '"schema": "lowtide-report"' in err and eloop in err, f"a final-name link loop: exit {rc}, {err[:300]!r}")
    check(os.path.islink(os.path.join(tmp, "self.json")), "the looping link left as it was")
    real = os.path.join(tmp, "real")
    os.mkdir(real)
    prev = "real"
    for i in range(1, 31):  # d1 -> real, d2 -> d1, ..., d30 -> d29
        os.symlink(prev, os.path.join(tmp, f"d{i}"))
        prev = f"d{i}"
    prev = "nowhere"
    for i in range(15, 0, -1):  # r.json -> f1 -> ... -> f14 -> nowhere
        name = "r.json" if i == 1 else f"f{i - 1}"
        os.symlink(prev, os.path.join(real, name))
        prev = name
    for depth, loops in ((30, True), (20, False)):
        env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=os.path.join(tmp, f"d{depth}", "r.json"))
        rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
        check(rc == 0 and '"schema": "lowtide-report"' in err, f"{depth} + 15 links: exit {rc}, {err[:300]!r}")
        check((eloop in err) == loops, f"{depth} + 15 links: ELOOP {'expected' if loops else 'not expected'}: {err[:300]!r}")
    check(sorted(os.listdir(real)) == sorted(["r.json"] + [f"f{i}" for i in range(1, 15)]), f"made: {os.listdir(real)}")


def case_closed_stderr(a, tmp, mode):
    """With fd 2 closed or read-only, a report for stderr (by name, by
    /dev/stderr, by malloc_stats, at exit) is dropped and counted; no file
    appears anywhere; the count shows in a later report."""
    path = os.path.join(tmp, "after.json")
    env = clean_env(a.lib, LOWTIDE_STATS="text", LOWTIDE_STATS_FILE="/dev/stderr")
    before = os.lstat("/dev/stderr")
    rc, out, err = run([a.prog, mode, path], env, 60, show_failure=True)
    check(rc == 0, f"exit status {rc}")
    lines = out.split()
    check(lines[:2] == ["rc=-1", "errno=9"], f"stderr report by name fails with EBADF: {out!r}")
    check(lines[2:4] == ["rc=-1", "errno=9"], f"/dev/stderr fails with EBADF: {out!r}")
    check(lines[4:6] == ["rc=0", "errno=0"], f"the JSON report to a file works: {out!r}")
    r = strict_json(read(path), "report") if os.path.exists(path) else None
    check(r is not None and r.get("reports_dropped") == 3,
          f"three reports counted as dropped: {None if r is None else r.get('reports_dropped')}")
    after = os.lstat("/dev/stderr")
    if not check(stat.S_ISLNK(after.st_mode) and after.st_ino == before.st_ino, "/dev/stderr untouched"):
        # A broken build replaced it (as root, for every process on the
        # machine): put it back before failing.
        if not stat.S_ISLNK(after.st_mode) and os.geteuid() == 0:
            os.unlink("/dev/stderr")
            os.symlink("/proc/self/fd/2", "/dev/stderr")
    check(sorted(os.listdir(tmp)) == ["after.json"], f"files made: {os.listdir(tmp)}")


def case_json_bytes(a, tmp):
    """Bytes that are not UTF-8 in argv and in thread names, and quotes,
    backslashes and control characters, still give a report a strict parser
    reads, with the valid parts unchanged."""
    target = os.path.join(tmp, "r.json")
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=target)
    argv = [a.prog.encode(), b"names", b"caf\xc3\xa9", b"\xff\xfe", b"\xc0\x80", b"\xed\xa0\x80", b'q"b\\\x01']
    rc, out, err = run(argv, env, 60, show_failure=True)
    check(rc == 0, f"exit status {rc}")
    r = strict_json(read(target), "report") if os.path.exists(target) else None
    if r is None:
        return
    check("caf\u00e9" in r["command"], f"valid UTF-8 kept: {r['command']!r}")
    check('q"b\\\x01' in r["command"], f"quote, backslash, control char kept: {r['command']!r}")
    names = [t["name"] for t in r["threads"]]
    check(any(n.startswith("m") for n in names) and any(n.startswith("w") for n in names), f"names {names}")


def case_long_name(a, tmp):
    """Report file names up to NAME_MAX (255 bytes) work: the temporary
    name does not grow with the final one."""
    for n in (246, 250, 255):
        target = os.path.join(tmp, "r" * (n - 5) + ".json")
        env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=target)
        rc, out, err = run([a.prog, "names"], env, 60, show_failure=True)
        check(rc == 0 and "cannot write" not in err, f"{n}-byte name: status {rc}, {err[:200]!r}")
        check(os.path.isfile(target), f"{n}-byte name: report written")


def case_oom(a, tmp):
    """Out of memory at exit: the address space capped at what is mapped
    and malloc used up. malloc_stats(), lowtide_write_report() and the exit
    report all still write something; the process ends with its own status
    (7), not abort's 134."""
    path = os.path.join(tmp, "api.txt")
    target = os.path.join(tmp, "exit.json")
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=target)
    rc, out, err = run([a.prog, "oom", path], env, 120)
    check(rc == 7, f"exit status {rc} (want 7): {err[-500:]!r}")
    check("blocks held:" in out, f"the program ran: {out!r}")
    check("==== lowtide" in err, "malloc_stats() wrote its report to stderr")
    check("rc=0" in out and os.path.exists(path), f"lowtide_write_report works: {out!r}")
    if os.path.exists(path):
        body = read(path)
        check(body.startswith(b"==== lowtide"), "the text part is there")
        j = body[body.find(b'{"schema"'):]
        check(strict_json(j, "JSON part") is not None, "the JSON part parses (whole or marked truncated)")
    r = strict_json(read(target), "exit report") if os.path.exists(target) else None
    check(r is not None and r.get("schema") == "lowtide-report", "the exit report parses")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--lib", required=True)
    ap.add_argument("--prog", required=True)
    a = ap.parse_args()
    cases = {
        "predictable_tmp": case_predictable_tmp,
        "sticky_symlink": case_sticky_symlink,
        "dir_link": case_dir_link,
        "proc_links": case_proc_links,
        "userns_dev_links": case_userns_dev_links,
        "dangling_link": case_dangling_link,
        "link_loops": case_link_loops,
        "link_rules": case_link_rules,
        "fifo_rules": case_fifo_rules,
        "closed_stderr": lambda a, t: case_closed_stderr(a, t, "closed-stderr"),
        "readonly_stderr": lambda a, t: case_closed_stderr(a, t, "readonly-stderr"),
        "json_bytes": case_json_bytes,
        "long_name": case_long_name,
        "oom": case_oom,
    }
    with tempfile.TemporaryDirectory(prefix="lt-sec-") as tmp:
        cases[a.case](a, tmp)
    finish(a.case)


if __name__ == "__main__":
    main()
