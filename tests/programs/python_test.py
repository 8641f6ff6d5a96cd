#!/usr/bin/python3
"""/usr/bin/python3 running its own regression tests (Debian's
libpython3.11-testsuite) for lists, dicts, bytes, threads, multiprocessing
and more, with and without lowtide. Each run writes a JUnit XML file of
every test case's outcome; both runs must pass, and the outcomes (passed,
skipped, failed, per test case) must be the same.

Usage: python_test.py <liblowtide.so>"""
import os
import sys
import xml.etree.ElementTree as ET

from real_common import check, finish, with_and_without

# About 2.5 minutes per run here. Not test_multiprocessing_forkserver or
# test_concurrent_futures: 4-5 minutes per run between them, and
# test_concurrent_futures failed on this machine without lowtide too.
# Since the twentieth stop also the modules of forks, signals and exits
# (fork1 to tracemalloc below: 693 test cases, ~1.5 minutes a run with two
# helpers' builds on the machine). Not test_subprocess: its
# test_pass_fds_redirected lists a child's descriptors exactly, and under
# lowtide the child has the live server's (docs/usage.md). Not test_socket:
# its VSOCK test hangs on this VM without lowtide too.
MODULES = ["test_list", "test_dict", "test_bytes", "test_set", "test_unicode", "test_json", "test_threading",
           "test_queue", "test_thread", "test_gc", "test_weakref", "test_multiprocessing_main_handling",
           "test_mmap", "test_array", "test_fork1", "test_threadsignals", "test_signal", "test_faulthandler",
           "test_posix", "test_tracemalloc", "test_wait4", "test_multiprocessing_fork"]


def outcomes(xml_path):
    result = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = case.get("classname", "") + "." + case.get("name", "")
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        result[name] = kinds[0] if kinds else "ok"
    return result


def main():
    lib = sys.argv[1]
    modules = os.environ.get("LOWTIDE_REAL_PYTHON_MODULES", " ".join(MODULES)).split()

    def session(runner, work):
        xml = os.path.join(work, "junit.xml")
        # -j2: two worker processes (under lowtide too); --timeout bounds a hung test
        rc, so, se = runner.run(["/usr/bin/python3", "-m", "test", "-j2", "--timeout=240", "--junit-xml", xml,
                                 *modules], timeout=1200, cwd=work, TMPDIR=work)
        tail = so.decode(errors="replace")[-1500:]
        label = "under lowtide" if runner.under else "without lowtide"
        check(rc == 0 and "Tests result: SUCCESS" in tail, f"python3 -m test {label}: exit {rc}\n{tail}")
        return outcomes(xml) if os.path.exists(xml) else {}

    plain, lt = with_and_without(lib, "python3 -m test", session)
    counts = {k: sum(1 for v in lt.values() if v == k) for k in ("ok", "skipped", "failure", "error")}
    print(f"python3 -m test: {len(modules)} modules, {len(lt)} test cases under lowtide: {counts}")
    check(len(lt) > 1000, f"only {len(lt)} test cases ran")
    differ = sorted(n for n in set(plain) | set(lt) if plain.get(n) != lt.get(n))
    check(not differ, f"{len(differ)} test cases differ: " + ", ".join(
        f"{n}: {plain.get(n)} -> {lt.get(n)}" for n in differ[:20]))
    finish("python3 -m test")


if __name__ == "__main__":
    main()
