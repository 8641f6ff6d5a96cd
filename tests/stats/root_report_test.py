#!/usr/bin/python3
"""Reports of a root process in states only root can set up
(root_report.c); exit 77 (a visible skip) when not root.

  root_report_test.py CASE --lib LIB --prog ROOT_REPORT

  groups  1000 supplementary groups: RSS and peak RSS still read (the
          status file's Groups line pushed them past a 4 KiB read)
  fsuid   a temporary report file owned by another uid (setfsuid): the
          report is refused, and no .lowtide-*.tmp is left behind

Every child run is bounded by a timeout."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env  # noqa: E402

TIMEOUT = 60


def case_groups(a, tmp):
    rep = os.path.join(tmp, "r.json")
    rc, out, err = lttest.run([a.prog, "groups", "1000", rep], clean_env(a.lib), TIMEOUT, show_failure=True)
    if not check(rc == 0, f"report written: status {rc}"):
        return
    with open(rep) as f:
        p = json.load(f)["process"]
    check(p["rss"] > 0 and p["peak_rss"] >= p["rss"], f"RSS read with 1000 groups: {p}")


def case_fsuid(a, tmp):
    d = os.path.join(tmp, "d")
    os.mkdir(d)
    os.chmod(tmp, 0o711)  # reachable by the file-system uid 65534
    os.chmod(d, 0o777)  # and writable: the temporary file is made, as 65534's
    rc, out, err = lttest.run([a.prog, "fsuid", d], clean_env(a.lib), TIMEOUT, show_failure=True)
    check(rc == 0, f"status {rc}")
    check("cannot write the report" in err and "File exists" in err, f"the report refused: {err[-2000:]!r}")
    left = os.listdir(d)
    check(left == [], f"nothing left in the directory: {left}")


CASES = {"groups": case_groups, "fsuid": case_fsuid}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--lib", required=True)
    ap.add_argument("--prog", required=True)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("skipped: needs root (setgroups, setfsuid)")
        return 77
    lttest.run_case(CASES[a.case], a, "lowtide-root-report-")
    return 0


if __name__ == "__main__":
    sys.exit(main())
