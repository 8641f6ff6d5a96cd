#!/usr/bin/python3
"""The exit report on a fd 2 nobody drains (docs/report.md): a pipe of one
page that is never read. The report must give up (after its 2 s bound)
and the process end; before, it waited for ever in write(2).

  stderr_pipe_test.py --lib LIB

The child run is bounded by a timeout (a hang is the failure)."""
import argparse
import fcntl
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env  # noqa: E402

F_SETPIPE_SZ = 1031
TIMEOUT = 60


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    a = ap.parse_args()
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, 4096)  # smaller than any text+JSON report
    env = clean_env(a.lib, LOWTIDE_STATS="both", LOWTIDE_STATS_FILE="stderr")
    p = subprocess.Popen(["/usr/bin/python3", "-c", "pass"], env=env, stdout=subprocess.DEVNULL, stderr=w)
    os.close(w)
    try:
        rc = p.wait(timeout=TIMEOUT)
        check(rc == 0, f"exit status {rc}")
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        check(False, f"still running after {TIMEOUT} s: the report on an undrained fd 2 held the exit")
    got = os.read(r, 1 << 20)
    check(got.startswith(b"==== lowtide"), f"the report's start in the pipe: {got[:80]!r}")
    os.close(r)
    lttest.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
