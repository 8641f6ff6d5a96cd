#!/usr/bin/python3
"""Item 8 of issue 13: the environment cannot steer a setuid program.

A copy of setuid_prog (linked against liblowtide) is made setuid root in a
fresh directory and run as nobody with MIMALLOC_* and LOWTIDE_* variables
that would each be visible if obeyed: MIMALLOC_VERBOSE / SHOW_STATS /
SHOW_ERRORS print on stderr, LOWTIDE_CUTOFF=4096 would send an 8 KiB block
to the large path, LOWTIDE_STATS + LOWTIDE_STATS_FILE would write a report
file, a misspelt LOWTIDE_STAT would be warned about. The same copy, not
setuid, run with the same environment, is the control: there every
variable must show its effect (so the secure run's silence means
something).

Needs root (to make a setuid-root file); as another user it is skipped
(exit 77) with the reason printed. As root, failing to set the binary up is
a failure, not a skip.

Usage: setuid_test.py <setuid_prog>"""
import os
import shutil
import stat
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env  # noqa: E402


def parse(out):
    facts = {}
    for line in out.splitlines():
        words = line.split()
        for k, v in zip(words[::2], words[1::2]):
            facts[k] = v
    return facts


def case(args, tmp):
    prog = args[0]
    # A directory nobody can enter, on a filesystem that honours setuid bits.
    os.chmod(tmp, 0o755)
    if os.statvfs(tmp).f_flag & os.ST_NOSUID:
        check(False, f"{tmp} is on a nosuid filesystem: cannot run a setuid binary there")
        return
    copy = os.path.join(tmp, "setuid_prog")
    shutil.copy(prog, copy)
    os.chown(copy, 0, 0)
    os.chmod(copy, 0o4755)
    mode = os.stat(copy).st_mode
    if not check(mode & stat.S_ISUID and os.stat(copy).st_uid == 0, f"{copy} is not setuid root: {oct(mode)}"):
        return
    setpriv = shutil.which("setpriv")
    if not check(setpriv is not None, "setpriv (util-linux) is needed to run the copy as nobody"):
        return
    report = os.path.join(tmp, "r.json")
    env = clean_env(MIMALLOC_VERBOSE="1", MIMALLOC_SHOW_STATS="1", MIMALLOC_SHOW_ERRORS="1",
                    MIMALLOC_PAGE_RESET="1", MIMALLOC_RESERVE_OS_MEMORY="64MiB",
                    LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=report, LOWTIDE_CUTOFF="4096",
                    LOWTIDE_STAT="text")  # misspelt: warned about, except when secure

    # Control: not secure (root runs its own file); every variable shows.
    rc, out, err = lttest.run([copy], env, 60, show_failure=True)
    facts = parse(out)
    check(rc == 0 and facts.get("at_secure") == "0", f"control run: exit {rc}, {facts}")
    check("mimalloc:" in err and "heap stats" in err,
          f"control run: MIMALLOC_VERBOSE/SHOW_STATS print on stderr: {err[:300]!r}")
    check(facts.get("large_maps_for_8k") == "1", f"control run: LOWTIDE_CUTOFF=4096 makes 8 KiB large: {facts}")
    check(os.path.exists(report), "control run: LOWTIDE_STATS_FILE report written")
    check(facts.get("term_int_caught") == "2", f"control run: lowtide's SIGTERM/SIGINT handlers installed: {facts}")
    check("LOWTIDE_STAT is not a lowtide setting" in err, f"control run: the misspelt name is warned about: {err[:300]!r}")
    if os.path.exists(report):
        os.unlink(report)

    # The secure run: nobody starts the setuid-root copy.
    argv = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", copy]
    rc, out, err = lttest.run(argv, env, 60, show_failure=True)
    facts = parse(out)
    check(rc == 0, f"secure run: exit {rc}, stderr {err[:500]!r}")
    check(facts.get("at_secure") == "1" and facts.get("euid") == "0" and facts.get("uid") != "0",
          f"secure run: AT_SECURE=1, euid 0, uid nobody: {facts}")
    check("mimalloc" not in err and "heap stats" not in err,
          f"secure run: no mimalloc output on stderr (MIMALLOC_* ignored): {err[:600]!r}")
    check(facts.get("large_maps_for_8k") == "0", f"secure run: LOWTIDE_CUTOFF ignored: {facts}")
    check(err == "", f"secure run: nothing at all on stderr: {err[:600]!r}")
    check(not os.path.exists(report), f"secure run: no report file written ({report})")
    check(facts.get("term_int_caught") == "0", f"secure run: no signal handler installed: {facts}")


def main():
    if os.geteuid() != 0:
        print("SKIP: making a setuid-root binary needs root; this test runs as uid", os.geteuid())
        sys.exit(77)
    lttest.run_case(case, sys.argv[1:], "lt-setuid-")


if __name__ == "__main__":
    main()
