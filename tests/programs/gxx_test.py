#!/usr/bin/python3
"""g++ compiling C++ with and without lowtide (the driver, cc1plus and as all
run under it): lowtide's own src/report.cpp (fmt, std::string, C++20) and
tests/stress/cross_threads.cpp (threads, templates), at -O2, to object files
and to assembly. The objects and the assembly must be byte for byte the same.

Usage: gxx_test.py <liblowtide.so> <source root>"""
import hashlib
import os
import sys

from real_common import check, finish, with_and_without


def main():
    lib, root = sys.argv[1], sys.argv[2]
    units = [
        ("src/report.cpp", ["-I", os.path.join(root, "src"), "-DFMT_HEADER_ONLY=1", '-DLOWTIDE_VERSION="real"']),
        ("tests/stress/cross_threads.cpp", []),
    ]

    def session(runner, work):
        out = []
        for src, extra in units:
            base = ["g++", "-std=c++20", "-O2", "-Wall", "-I", os.path.join(root, "include"), *extra,
                    os.path.join(root, src)]
            for kind, flag, name in (("object", "-c", "unit.o"), ("assembly", "-S", "unit.s")):
                target = os.path.join(work, name)
                rc, so, se = runner.run(base + [flag, "-o", target], timeout=300, cwd=work)
                check(rc == 0, f"g++ {flag} {src}: exit {rc}: {se.decode(errors='replace')[-800:]}")
                data = open(target, "rb").read() if rc == 0 else b""
                out.append((f"{src} {kind}", rc, hashlib.sha256(data).hexdigest(), len(data), se))
        return out

    results = dict(zip((False, True), with_and_without(lib, "g++", session)))
    for a, b in zip(results[False], results[True]):
        check(a == b, f"{a[0]}: differs under lowtide (sha256 {a[2][:12]} vs {b[2][:12]}, {a[3]} vs {b[3]} bytes)")
        print(f"  {a[0]}: {b[3]} bytes, sha256 {b[2][:16]} with and without lowtide")
    finish("g++")


if __name__ == "__main__":
    main()
