#!/usr/bin/python3
"""Unknown LOWTIDE_* names in a real host (/usr/bin/python3 under the shim):

1. A misspelt setting (LOWTIDE_STAT=text) gets exactly one warning at start,
   naming it and the nearest setting; a name near none gets one too, without
   a suggestion; the host runs normally.
2. Every LOWTIDE_* name that lowtide's own tools, scripts and tests set or
   read (found by scanning the source tree) is either a setting or one of
   the library's tool variables: none of them draws a warning. A name added
   to a script without being listed in kToolVariables (src/options.cpp) or
   made a setting fails here (docs/configuration.md states the rule).

Usage: unknown_names_test.py <liblowtide.so> <source root>"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env, finish  # noqa: E402

# LOWTIDE_ tokens in the tree that are not environment variables: C macros
# and enumerators, the symbol version node, shell arrays, and misspellings
# tests use on purpose.
NOT_VARIABLES = {
    "LOWTIDE_STAT",            # the counter table's macro (and a misspelling tests use)
    "LOWTIDE_VERSION", "LOWTIDE_0", "LOWTIDE_NO_COUNTERS", "LOWTIDE_INVARIANTS", "LOWTIDE_LOWTIDE_H",
    "LOWTIDE_STATS_DEF", "LOWTIDE_CONFIGURED", "LOWTIDE_DEBS", "LOWTIDE_DEMO_DEBS", "LOWTIDE_TEST_DEBS",
    "LOWTIDE_REPORT_CONFIGURED", "LOWTIDE_REPORT_TEXT", "LOWTIDE_REPORT_JSON", "LOWTIDE_REPORT_BOTH",
    "LOWTIDE_REPORT_PROMETHEUS",
    "LOWTIDE_X",               # tests/stress/subprocess_test.py: a variable no one knows, on purpose
    "LOWTIDE_CUTOF", "LOWTIDE_CUTOFFX",  # misspellings in tests
}
SCAN = ["python", "scripts", "examples", "bench", "tests", "src"]
SKIP = {os.path.join("tests", "unit"), os.path.join("tests", "fuzz")}  # deliberate misspellings


def names_in_tree(root):
    found = set()
    for top in SCAN:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            rel = os.path.relpath(d, root)
            if any(rel == s or rel.startswith(s + os.sep) for s in SKIP):
                continue
            for f in files:
                if f == os.path.basename(__file__):
                    continue
                try:
                    with open(os.path.join(d, f), errors="replace") as fh:
                        found.update(re.findall(r"\bLOWTIDE_[A-Z0-9_]*[A-Z0-9]\b", fh.read()))
                except OSError:
                    pass
    return found - NOT_VARIABLES


def warnings(err):
    return [ln for ln in err.splitlines() if ln.startswith("lowtide: warning:")]


def main():
    lib, root = sys.argv[1], sys.argv[2]
    host = ["/usr/bin/python3", "-c", "print('ran')"]
    rc, out, err = lttest.run(host, clean_env(lib, LOWTIDE_STAT="text"), 60)
    check(rc == 0 and out == "ran\n", f"LOWTIDE_STAT: host exit {rc}, {out!r}")
    check(warnings(err) == ["lowtide: warning: LOWTIDE_STAT is not a lowtide setting and has no effect; "
                            "did you mean LOWTIDE_STATS?"], f"one warning with the nearest setting: {err!r}")
    check("====" not in err, "the misspelt LOWTIDE_STAT=text turns no report on")
    rc, out, err = lttest.run(host, clean_env(lib, LOWTIDE_FROBNICATE="1"), 60)
    check(rc == 0 and warnings(err) == ["lowtide: warning: LOWTIDE_FROBNICATE is not a lowtide setting and has no "
                                        "effect (the settings: docs/configuration.md)"],
          f"a name near no setting: {err!r}")

    names = sorted(names_in_tree(root))
    check(len(names) >= 15, f"the scan found the tree's names: {names}")
    for n in ("LOWTIDE_OWNER_PID", "LOWTIDE_TEST_LIB", "LOWTIDE_BUILD_DIR", "LOWTIDE_STATS"):
        check(n in names, f"{n} found by the scan")
    # The settings (docs/configuration.md's rows, which the unit tests hold
    # to kOptions) are known by construction; the rest are set, to "1".
    with open(os.path.join(root, "docs", "configuration.md")) as f:
        settings = set(re.findall(r"^\| `(LOWTIDE_[A-Z0-9_]+)` \|", f.read(), re.M))
    check("LOWTIDE_DECAY_MS" in settings, f"settings read from docs/configuration.md: {settings}")
    others = [n for n in names if n not in settings]
    check(len(others) >= 8, f"names that are not settings: {others}")
    env = clean_env(lib, **{n: "1" for n in others})
    rc, out, err = lttest.run(host, env, 60)
    unknown = [w for w in warnings(err) if "is not a lowtide setting" in w]
    check(rc == 0 and not unknown, f"names lowtide's tools use draw no unknown-name warning: {unknown}")
    print(f"unknown_names: {len(names)} names from the tree")
    finish("unknown_names")


if __name__ == "__main__":
    main()
