#!/usr/bin/python3
"""Processes started from the reporting one that wrote no report of their
own (LOWTIDE_STATS_FILE without %p) are counted in its report
(`unreported_children`, the text line "children N process(es) ...").

Each command runs twice: with %p every process writes its own report, so
the number of files less the owner's is how many children there were; then
without %p the owner's report must count exactly that many. Commands: a
shell running three programs (`sh -c`), `timeout` around a shell (timeout
closes stderr at exit, so the report goes to a file), a Python parent whose
subprocess children have every other fd closed (close_fds: the counter is
found through /proc/OWNER/fd), and a forked child that never execs. With %p
the owner counts none. And a child whose fd number now names another file
(the shell redirected it) must leave that file untouched.

Usage: children_test.py <liblowtide.so>"""
import glob
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from lttest import check, clean_env, finish, run  # noqa: E402

PY = "/usr/bin/python3"  # not a wrapper script that starts processes of its own
COMMANDS = {
    "sh": ["/bin/sh", "-c", "/bin/true; /bin/true; /bin/true; echo done"],
    "timeout": ["/usr/bin/timeout", "60", "/bin/sh", "-c", "/bin/true; /bin/true; echo done"],
    "subprocess": [PY, "-c", "import subprocess\nfor _ in range(3): subprocess.run(['/bin/true'], check=True)"],
    "fork": [PY, "-c", "import os, sys\npid = os.fork()\nif pid == 0: sys.exit(0)\nos.waitpid(pid, 0)"],
}


def owner_report(path):
    with open(path) as f:
        return json.load(f)


def main():
    lib = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="lowtide-children-") as tmp:
        for name, argv in COMMANDS.items():
            per = os.path.join(tmp, name + ".%p.json")
            rc, out, err = run(argv, clean_env(lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=per), 120)
            files = glob.glob(os.path.join(tmp, name + ".*.json"))
            check(rc == 0, f"{name} with %p: exit {rc} {err[-500:]!r}")
            children = len(files) - 1
            check(children >= 1, f"{name}: {children} children wrote reports with %p")
            owner_pids = [r["pid"] for r in map(owner_report, files) if r["unreported_children"] != 0]
            check(not owner_pids, f"{name} with %p: nobody counts an unreported child: {owner_pids}")

            one = os.path.join(tmp, name + ".json")
            rc, out, err = run(argv, clean_env(lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=one), 120)
            check(rc == 0, f"{name} without %p: exit {rc}")
            r = owner_report(one)
            check(r["unreported_children"] == children,
                  f"{name}: the owner counts {r['unreported_children']} unreported, {children} children ran")

            text = os.path.join(tmp, name + ".txt")
            run(argv, clean_env(lib, LOWTIDE_STATS="text", LOWTIDE_STATS_FILE=text), 120)
            with open(text) as f:
                t = f.read()
            check(f"children    {children} process(es) started from this one wrote no report of their own" in t
                  and "put %p in LOWTIDE_STATS_FILE" in t, f"{name}: the text report says so: {t[:600]!r}")

        # The counter's fd number taken over by a file in the shell (so in the
        # children it starts after that): they find it is not the counter and
        # leave the file alone, and are not counted (the count is the same as
        # without them).
        victim = os.path.join(tmp, "victim")
        counts = []
        for tail in ("", "/bin/true; /bin/true; "):
            one = os.path.join(tmp, "redirect.json")
            env = clean_env(lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=one)
            rc, out, err = run(["/bin/sh", "-c", 'fd=${LOWTIDE_OWNER_PID#*:}; fd=${fd%%:*}; '
                                'eval "exec $fd>' + victim + '"; ' + tail + 'echo done'], env, 120)
            check(rc == 0 and out == "done\n", f"redirected: exit {rc} {out!r} {err[-300:]!r}")
            check(os.path.getsize(victim) == 0, f"the file on the counter's fd number was written: "
                  f"{os.path.getsize(victim)} bytes")
            counts.append(owner_report(one)["unreported_children"])
        check(counts[0] == counts[1], f"children that cannot reach the counter are not counted: {counts}")
    finish("children")


if __name__ == "__main__":
    main()
