"""scripts/lib/deps.sh's split: the demo needs only LOWTIDE_DEMO_DEBS.

  deps_test.py SOURCE_ROOT BUILD_ROOT

dpkg-query, id and apt-get are replaced by fakes on PATH: the fake
dpkg-query says "installed" for every package but those in the file
$FAKE_MISSING; the fake apt-get logs its arguments and "installs" by
taking names out of that file. Checked: the two lists are real packages of
this machine (dpkg-query, the real one) and do not overlap; scripts/demo
run as a non-root user missing only test packages runs the demo to its
table; missing a demo package it stops first, naming only that one; as root
it installs only the demo's missing packages; scripts/test's check asks for
both lists."""
import os
import re
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from lttest import check, clean_env, finish, run  # noqa: E402

src_root, build_root = sys.argv[1:3]
deps = os.path.join(src_root, "scripts", "lib", "deps.sh")

FAKE_DPKG = """#!/bin/sh
# last argument: the package
for p; do :; done
if grep -qx -- "$p" "$FAKE_MISSING"; then echo not-installed; else echo installed; fi
"""
FAKE_ID = """#!/bin/sh
[ "$1" = -u ] && { echo "$FAKE_UID"; exit 0; }
exec /usr/bin/id "$@"
"""
FAKE_APT = """#!/bin/sh
echo "$*" >> "$FAKE_APT_LOG"
[ "$1" = install ] || exit 0
for p; do
  case "$p" in -*|install) ;; *) grep -vx -- "$p" "$FAKE_MISSING" > "$FAKE_MISSING.new"; mv "$FAKE_MISSING.new" "$FAKE_MISSING";; esac
done
"""


def bash(script, env):
    return run(["bash", "-c", 'set -euo pipefail; source "$DEPS"; ' + script], env, timeout=60)


def lists(env):
    rc, out, err = bash('echo "${LOWTIDE_DEMO_DEBS[*]}"; echo "${LOWTIDE_TEST_DEBS[*]}"; echo "${LOWTIDE_DEBS[*]}"',
                        env)
    check(rc == 0, "deps.sh sources: %s" % err)
    demo, test, all_ = (line.split() for line in out.splitlines()[:3])
    return demo, test, all_


with tempfile.TemporaryDirectory(prefix="lowtide-deps-") as tmp:
    fake = os.path.join(tmp, "bin")
    os.mkdir(fake)
    for name, text in (("dpkg-query", FAKE_DPKG), ("id", FAKE_ID), ("apt-get", FAKE_APT)):
        path = os.path.join(fake, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, stat.S_IRWXU)
    missing_file = os.path.join(tmp, "missing")
    apt_log = os.path.join(tmp, "apt.log")

    real = clean_env(DEPS=deps)
    demo, test, all_ = lists(real)
    check(len(demo) >= 5 and len(test) >= 5, "both lists filled: %s | %s" % (demo, test))
    check(not set(demo) & set(test), "no package in both lists: %s" % (set(demo) & set(test)))
    check(all_ == demo + test, "LOWTIDE_DEBS is both lists")
    for needed in ("meson", "ninja-build", "g++", "libmimalloc-dev", "libfmt-dev", "python3"):
        check(needed in demo, "the demo's build needs %s" % needed)
    for test_only in ("valgrind", "clang-14", "catch2", "cppcheck"):
        check(test_only in test and test_only not in demo, "%s is for the tests only" % test_only)
    # The names are real: the real dpkg-query knows each one as installed
    # here (scripts/test installed them).
    rc, out, err = bash("lowtide_missing_debs", real)
    check(rc == 0 and out.strip() == "", "every listed package is installed here (a misspelt name is not): %r" % out)

    def env_with(missing, uid):
        with open(missing_file, "w") as f:
            f.write("".join(m + "\n" for m in missing))
        if os.path.exists(apt_log):
            os.unlink(apt_log)
        return clean_env(DEPS=deps, PATH=fake + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                         FAKE_MISSING=missing_file, FAKE_UID=str(uid), FAKE_APT_LOG=apt_log)

    # A non-root user without valgrind, clang and catch2: the demo runs.
    build_rel = os.path.relpath(build_root, src_root)
    env = env_with(["valgrind", "clang-14", "catch2", "cppcheck"], 1000)
    env["LOWTIDE_BUILD_DIR"] = build_rel
    rc, out, err = run([os.path.join(src_root, "scripts", "demo"), "--total", "96MB", "--rounds", "1"],
                       env, timeout=300, cwd=tmp)
    check(rc == 0 and "| 1 s after the free |" in out,
          "demo as non-root missing only test packages: rc %d\n%s\n%s" % (rc, out[-1500:], err[-1500:]))
    check("missing Debian packages" not in err, "the demo did not ask for test packages: %s" % err[-500:])

    # Missing a package the demo needs: it stops before building, naming
    # that one and no test package.
    env = env_with(["valgrind", "ninja-build"], 1000)
    env["LOWTIDE_BUILD_DIR"] = build_rel
    rc, out, err = run([os.path.join(src_root, "scripts", "demo")], env, timeout=60, cwd=tmp)
    check(rc == 1 and "missing Debian packages: ninja-build\n" in err and "seed workload" not in out,
          "demo without ninja-build: rc %d %r %r" % (rc, out[-300:], err[-500:]))

    # As root: apt-get installs exactly the demo's missing packages.
    env = env_with(["valgrind", "meson", "libfmt-dev"], 0)
    rc, out, err = bash('lowtide_ensure_debs "${LOWTIDE_DEMO_DEBS[@]}"', env)
    with open(apt_log) as f:
        log = f.read()
    installs = [line.split() for line in log.splitlines() if line.startswith("install")]
    check(rc == 0 and len(installs) == 1 and [p for p in installs[0] if not p.startswith("-")][1:] ==
          ["meson", "libfmt-dev"], "root: apt-get installs the demo's missing ones only: %r %s" % (log, err))

    # scripts/test's check asks for both lists: the line it runs, run here.
    with open(os.path.join(src_root, "scripts", "test")) as f:
        calls = re.findall(r"^lowtide_ensure_debs.*$", f.read(), re.M)
    check(calls == ['lowtide_ensure_debs "${LOWTIDE_DEMO_DEBS[@]}" "${LOWTIDE_TEST_DEBS[@]}"'],
          "scripts/test ensures both lists: %r" % calls)
    with open(os.path.join(src_root, "scripts", "demo")) as f:
        calls = re.findall(r"^lowtide_ensure_debs.*$", f.read(), re.M)
    check(calls == ['lowtide_ensure_debs "${LOWTIDE_DEMO_DEBS[@]}"'], "scripts/demo ensures the demo's: %r" % calls)
    env = env_with(["valgrind"], 1000)
    rc, out, err = bash('lowtide_ensure_debs "${LOWTIDE_DEMO_DEBS[@]}" "${LOWTIDE_TEST_DEBS[@]}"', env)
    check(rc == 1 and "missing Debian packages: valgrind\n" in err, "the tests' check stops without valgrind: %r" % err)

finish()
