#!/usr/bin/python3
"""Control characters in what a warning quotes from the environment (a bad
value, an unknown LOWTIDE_* name, a report path that cannot be written)
are shown as '?': each warning stays one line, and nothing of it can drive
the terminal; a report path is shown cut to 200 bytes, so that the end of
the warning always fits (reliability.md no. 98). Before, a newline in a bad value
made the warning two lines, the second one whatever followed the newline
("lowtide: ..." forged), and an ESC sequence went to the terminal as it
was.

Usage: warn_controls_test.py <liblowtide.so>"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env, finish  # noqa: E402

FORGED = "\nlowtide: forged line\x1b[31m\x07\x7f\u009b"
SHOWN = "?lowtide: forged line?[31m???"


def warnings_of(err):
    """stderr's text before a report's first line, as lines."""
    head = err.split("==== lowtide", 1)[0]
    return head.splitlines(keepends=True)


def controls(text):
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or ord(c) == 0x7f or 0x80 <= ord(c) <= 0x9f]


def main():
    lib = sys.argv[1]
    cases = [
        ("a bad value", clean_env(lib, LOWTIDE_CUTOFF="1x" + FORGED),
         "lowtide: warning: LOWTIDE_CUTOFF='1x" + SHOWN + "' is not a size"),
        ("an unknown name", clean_env(lib, **{"LOWTIDE_CUTOF" + FORGED: "1"}),
         "lowtide: warning: LOWTIDE_CUTOF" + SHOWN + " is not a lowtide setting"),
        ("a report path that cannot be written",
         clean_env(lib, LOWTIDE_STATS="text", LOWTIDE_STATS_FILE="/nonexistent-dir" + FORGED + "/r.txt"),
         "lowtide: warning: cannot write the report to '/nonexistent-dir" + SHOWN + "/r.txt'"),
        # A path of 1,000 bytes (LOWTIDE_STATS_FILE takes up to 1,023;
        # lowtide_write_report up to 4 KiB): shown cut to its first 200
        # bytes, so that the end of the warning (what happens to the
        # report) still fits its 512 bytes.
        ("a long report path", clean_env(lib, LOWTIDE_STATS="text",
                                         LOWTIDE_STATS_FILE="/nonexistent-dir/" + "d/" * 489 + "r.txt"),
         "lowtide: warning: cannot write the report to '/nonexistent-dir/d/d/"),
    ]
    for what, env, start in cases:
        rc, _, err = lttest.run(["/bin/true"], env, 60)
        lines = warnings_of(err)
        check(rc == 0, f"{what}: exit status {rc}")
        check(len(lines) == 1 and lines[0].startswith(start) and lines[0].endswith("\n"),
              f"{what}: one warning line, the value shown with '?': {lines!r}")
        check(not controls("".join(lines)), f"{what}: control characters in the warning: {lines!r}")
        if "report path" in what:
            check(len(lines) == 1 and lines[0].endswith("; writing it to stderr instead\n"),
                  f"{what}: the warning's end is there: {[ln[-120:] for ln in lines]!r}")
    finish("warn_controls")


if __name__ == "__main__":
    main()
