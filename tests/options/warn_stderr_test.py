#!/usr/bin/python3
"""A warning (a bad LOWTIDE_* value, reported at start) on an fd 2 that
cannot take it must neither hold nor kill the process (docs/reliability.md
no. 49). /bin/true writes nothing itself, so whatever happens to it is
lowtide's doing:

* a pipe whose reader is there: the warning arrives (the case the others
  are measured against: the value does warn);
* a pipe that is full and never read: the process ends (before: it waited
  for ever in write(2));
* a pipe whose reader is gone: the process ends with status 0 (before: it
  died of SIGPIPE, status -13).

  warn_stderr_test.py LIB"""
import fcntl
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env  # noqa: E402

F_SETPIPE_SZ = 1031
TIMEOUT = 30


def run(env, w):
    # restore_signals (the default): the child starts with SIGPIPE's default
    # action, as a program started from a shell does.
    p = subprocess.Popen(["/bin/true"], env=env, stdout=subprocess.DEVNULL, stderr=w)
    os.close(w)
    try:
        return p.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return None


def main():
    env = clean_env(sys.argv[1], LOWTIDE_CUTOFF="bogus")

    r, w = os.pipe()
    rc = run(env, w)
    got = os.read(r, 1 << 16)
    os.close(r)
    check(rc == 0, f"drained pipe: exit status {rc}")
    check(b"LOWTIDE_CUTOFF" in got, f"drained pipe: the warning names the variable: {got!r}")

    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    rc = run(env, w)
    os.close(r)
    check(rc == 0, f"full pipe: exit status {rc} (None: still running after {TIMEOUT} s)")

    r, w = os.pipe()
    os.close(r)
    rc = run(env, w)
    check(rc == 0, f"pipe without a reader: exit status {rc} (-13: killed by SIGPIPE)")
    lttest.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
