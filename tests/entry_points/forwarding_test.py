"""Forwarding mode: lowtide later in LD_PRELOAD than another allocator
(jemalloc), lowtide dlopen'ed into a process that is not preloaded, and an
executable with its own malloc, free, calloc and realloc only (OWN_MALLOC).
The programs check that every block is the winner's and that the functions
the winner lacks (jemalloc's malloc_trim and mallopt, the executable's
posix_memalign and the rest) return; here, that they end well and that
lowtide says once, on stderr, that it stays out of the way.

    forwarding_test.py PROG LIB JEMALLOC OWN_MALLOC
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from lttest import check, clean_env, finish, run  # noqa: E402

WARNING = "lowtide forwards every call to it and stays out of the way"


def main():
    prog, lib, jemalloc, own_malloc = sys.argv[1:5]
    check(os.path.exists(jemalloc), f"{jemalloc} exists (Debian package libjemalloc2)")
    env = clean_env(None, LD_PRELOAD=f"{jemalloc} {lib}", LOWTIDE_STATS="text")
    rc, out, err = run([prog, "preload"], env, 120, show_failure=True)
    check(rc == 0 and "lowtide made none" in out, f"preload case: status {rc} {out!r}")
    check(err.count(WARNING) == 1, f"one forwarding warning: {err[-600:]!r}")
    env = clean_env(None)
    rc, out, err = run([prog, "dlopen", lib], env, 120, show_failure=True)
    check(rc == 0 and "every block was glibc's" in out, f"dlopen case: status {rc} {out!r}")
    check(err.count(WARNING) == 1, f"one forwarding warning: {err[-600:]!r}")
    env = clean_env(None, LD_PRELOAD=lib)
    rc, out, err = run([own_malloc], env, 60, show_failure=True)
    check(rc == 0 and "every call returned" in out, f"own-malloc case: status {rc} {out!r} {err[-600:]!r}")
    check(err.count(WARNING) == 1, f"one forwarding warning: {err[-600:]!r}")
    finish("forwarding")


if __name__ == "__main__":
    main()
