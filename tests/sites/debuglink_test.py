#!/usr/bin/python3
"""A report's debug-file search (docs/report.md, reliability.md no. 110):
sites_debuglink (sites_debuglink.c) makes a report with call sites on and
fails where the report loaded debuginfod's client or libcurl into the
process. Here its frame #0, the static function split_site, must be named
where that name is only in a separate debug file found through the
binary's .gnu_debuglink, and never from a debug file that is not the
binary's. One case per meson test:

  debuglink_test.py CASE --lib LIB --prog P --decoy D --prog-nobid PN
                    --decoy-nobid DN --objcopy OBJCOPY --strip STRIP

P and D are one source built with -g, D's static function named
decoy_site (same length: the same layout, another build ID); PN and DN the
same without a build ID (checked by the debuglink's CRC). Every child run
is bounded by a timeout."""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env  # noqa: E402

TIMEOUT = 120
NAME = "sites_debuglink_split"


def tool(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT)
    if p.returncode != 0:
        raise SystemExit(f"{argv}: exit status {p.returncode}: {p.stdout.decode(errors='replace')}")


def split(a, tmp, prog, debug_from, subdir=""):
    """tmp/NAME: prog stripped of its debug info and symbols, with a
    .gnu_debuglink to NAME.debug (its CRC that of prog's own debug file);
    the file left at tmp/subdir/NAME.debug is debug_from's debug file."""
    own = os.path.join(tmp, "own.debug")
    tool([a.objcopy, "--only-keep-debug", prog, own])
    stripped = os.path.join(tmp, "stripped")
    tool([a.strip, "--strip-debug", "--strip-unneeded", "-o", stripped, prog])
    where = os.path.join(tmp, subdir)
    os.makedirs(where, exist_ok=True)
    dbg = os.path.join(where, NAME + ".debug")
    shutil.move(own, dbg)
    out = os.path.join(tmp, NAME)
    tool([a.objcopy, "--add-gnu-debuglink=" + dbg, stripped, out])
    os.unlink(stripped)
    if debug_from != prog:
        tool([a.objcopy, "--only-keep-debug", debug_from, dbg])
    with open(out, "rb") as f:
        check(b"split_site" not in f.read(), f"{out}: split_site is only in the debug file")
    return out


def frame0(a, tmp, prog):
    """Runs prog under lowtide with sites on (it fails where the report
    loaded debuginfod's client); returns frame #0 of the site in prog."""
    rep = os.path.join(tmp, "r.json")
    env = clean_env(a.lib, LOWTIDE_STATS="off", LOWTIDE_SITES="8", LOWTIDE_SITE_SAMPLE="0")
    env.pop("DEBUGINFOD_URLS", None)
    rc, out, err = lttest.run([prog, rep], env, TIMEOUT, show_failure=True)
    if rc == 77:
        print(out, end="")
        raise SystemExit(77)
    check(rc == 0, f"{prog}: exit status {rc}")
    with open(rep) as f:
        top = json.load(f)["sites"]["top"]
    mine = [row["frames"][0] for row in top
            if row["frames"] and row["frames"][0]["module"] == os.path.realpath(prog)]
    if not check(len(mine) == 1, f"one site whose frame #0 is in {prog}: {top}"):
        return {}
    return mine[0]


def named(a, tmp, prog, want):
    fr = frame0(a, tmp, prog)
    check(fr.get("function") == want, f"{prog}: frame #0 named {want}: {fr}")


def case_no_debuginfod(a, tmp):
    # A copy without DWARF and without a debuglink (its .symtab kept: the
    # name): the report's lookup of its DWARF finds no debug file, where
    # libdw's standard search loaded debuginfod's client (sites_debuglink.c
    # fails then). An object of its own: this machine's libc may have its
    # debug file installed (libc6-dbg).
    out = os.path.join(tmp, NAME)
    tool([a.strip, "--strip-debug", "-o", out, a.prog])
    named(a, tmp, out, "split_site")


def case_build_id(a, tmp):
    named(a, tmp, split(a, tmp, a.prog, a.prog), "split_site")
    shutil.rmtree(tmp)
    os.makedirs(tmp)
    named(a, tmp, split(a, tmp, a.prog, a.prog, ".debug"), "split_site")


def case_wrong_build_id(a, tmp):
    fr = frame0(a, tmp, split(a, tmp, a.prog, a.decoy))
    check(fr.get("function") != "decoy_site", f"the decoy's debug file (another build ID) not used: {fr}")


def case_crc(a, tmp):
    named(a, tmp, split(a, tmp, a.prog_nobid, a.prog_nobid), "split_site")


def case_wrong_crc(a, tmp):
    fr = frame0(a, tmp, split(a, tmp, a.prog_nobid, a.decoy_nobid))
    check(fr.get("function") != "decoy_site", f"the decoy's debug file (another CRC) not used: {fr}")


CASES = {"no_debuginfod": case_no_debuginfod, "build_id": case_build_id, "wrong_build_id": case_wrong_build_id,
         "crc": case_crc, "wrong_crc": case_wrong_crc}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    for opt in ("--lib", "--prog", "--decoy", "--prog-nobid", "--decoy-nobid", "--objcopy", "--strip"):
        ap.add_argument(opt, required=True)
    a = ap.parse_args()
    lttest.run_case(CASES[a.case], a, "lowtide-debuglink-")
    return 0


if __name__ == "__main__":
    sys.exit(main())
