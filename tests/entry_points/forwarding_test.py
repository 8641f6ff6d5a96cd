"""Forwarding mode: lowtide later in LD_PRELOAD than another allocator
(jemalloc), and lowtide dlopen'ed into a process that is not preloaded. The
program checks that every block is the winner's; here, that it ends well and
that lowtide says once, on stderr, that it stays out of the way.

    forwarding_test.py PROG LIB JEMALLOC
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from lttest import check, clean_env, finish, run  # noqa: E402

WARNING = "lowtide forwards every call to it and stays out of the way"


def main():
    prog, lib, jemalloc = sys.argv[1:4]
    check(os.path.exists(jemalloc), f"{jemalloc} exists (Debian package libjemalloc2)")
    env = clean_env(None, LD_PRELOAD=f"{jemalloc} {lib}", LOWTIDE_STATS="text")
    rc, out, err = run([prog, "preload"], env, 120, show_failure=True)
    check(rc == 0 and "lowtide made none" in out, f"preload case: status {rc} {out!r}")
    check(err.count(WARNING) == 1, f"one forwarding warning: {err[-600:]!r}")
    env = clean_env(None)
    rc, out, err = run([prog, "dlopen", lib], env, 120, show_failure=True)
    check(rc == 0 and "every block was glibc's" in out, f"dlopen case: status {rc} {out!r}")
    check(err.count(WARNING) == 1, f"one forwarding warning: {err[-600:]!r}")
    finish("forwarding")


if __name__ == "__main__":
    main()
