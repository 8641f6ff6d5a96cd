#!/usr/bin/python3
"""Names from outside the library in the text report (docs/report.md): a
command-line argument and a thread name holding an escape sequence and a
newline must come out with those bytes as '?', so that a report shown on a
terminal cannot move its cursor or recolour it, and a name cannot forge a
line of the report. Before 2026-12-06 they went out as they were. The JSON
report escapes them (checked here too: it still holds the name whole).

  report_controls_test.py --lib LIB"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env  # noqa: E402

NAME = b"t\x1b[31m\nforged"  # 15 bytes: fits a thread name (16 with its NUL)
ARG = "arg\x1b[2J\nforged line from the command\x07"
# U+009B, CSI as one C1 control (UTF-8 c2 9b): xterm and VTE clear the
# screen at it as at ESC [. Before the fix it went out as it was.
ARG_C1 = "c1\u009b2J"
PROG = r"""
import ctypes, sys
libc = ctypes.CDLL(None)
libc.prctl(15, ctypes.c_char_p(sys.argv[1].encode("latin-1")), 0, 0, 0)  # PR_SET_NAME
b = [bytes(2000) for _ in range(100)]  # a few counted calls on this thread
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lt-controls-") as d:
        text = os.path.join(d, "r.txt")
        js = os.path.join(d, "r.json")
        for kind, path in (("text", text), ("json", js)):
            env = clean_env(a.lib, LOWTIDE_STATS=kind, LOWTIDE_STATS_FILE=path)
            p = subprocess.run(["/usr/bin/python3", "-c", PROG, NAME.decode("latin-1"), ARG, ARG_C1], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
            check(p.returncode == 0, f"{kind}: exit status {p.returncode}: {p.stderr[-500:]!r}")
        with open(text, "rb") as f:
            body = f.read()
        bad = sorted({c for c in body if (c < 0x20 and c != 0x0A) or c == 0x7F})
        check(not bad, f"text report: control bytes {bad} in it")
        lines = body.split(b"\n")
        check(not any(ln.startswith(b"forged") for ln in lines), "text report: a name started a line of its own")
        check(any(b"t?[31m?forged" in ln for ln in lines), "text report: the thread's name, shown with '?'")
        check(any(b"arg?[2J?forged line from the command?" in ln for ln in lines),
              "text report: the command line, shown with '?'")
        check(not any(b"\xc2" + bytes([c]) in body for c in range(0x80, 0xA0)),
              "text report: no C1 control (UTF-8) in it")
        check(any(b"c1?2J" in ln for ln in lines), "text report: the C1 control in the command line shown as '?'")
        with open(js) as f:
            rep = json.load(f)
        names = [t.get("name") for t in rep.get("threads", [])]
        check(NAME.decode("latin-1") in names, f"JSON report: the thread's name whole: {names!r}")
        check(ARG in rep.get("command", ""), f"JSON report: the command whole: {rep.get('command')!r}")
        check(ARG_C1 in rep.get("command", ""), f"JSON report: the C1 argument whole: {rep.get('command')!r}")
    lttest.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
