#!/usr/bin/python3
"""Names in call sites (docs/report.md): static and hidden functions named
from .symtab/DWARF through libdw, with file:line; Python frames of the
thread that holds the GIL. One case per meson test:

  names_test.py CASE --lib LIB --prog NAMES_PROG --src DIR

Every child run is bounded by a timeout."""
import argparse
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env  # noqa: E402

TIMEOUT = 150
PYTHON = "/usr/bin/python3"


def marker_line(path, marker):
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if marker in line:
                return n
    raise SystemExit(f"no {marker} in {path}")


def run_report(argv, tmp, **extra):
    rep = os.path.join(tmp, "r.txt")
    env = clean_env(extra.pop("lib"), LOWTIDE_STATS="both", LOWTIDE_SITES="50", LOWTIDE_SITE_SAMPLE="0",
                    LOWTIDE_STATS_FILE=rep, **extra)
    rc, out, err = lttest.run(argv, env, TIMEOUT, show_failure=True)
    check(rc == 0, f"{argv}: exit status {rc}")
    check("warning" not in err, f"no warning: {err[-2000:]!r}")
    with open(rep) as f:
        body = f.read()
    text, _, js = body.partition('{"schema"')
    return text, json.loads('{"schema"' + js)["sites"]


def case_static(a, tmp):
    src = os.path.join(a.src, "names_lib.cpp")
    want = {"static_alloc": marker_line(src, "MALLOC-STATIC"), "hidden_alloc": marker_line(src, "MALLOC-HIDDEN"),
            "outer_alloc": marker_line(src, "MALLOC-OUTER")}
    text, s = run_report([a.prog], tmp, lib=a.lib)
    for fn, line in want.items():
        hits = [fr for row in s["top"] for fr in row["frames"][:1]
                if fr["function"] is not None and fn in fr["function"]]
        if not check(len(hits) == 1, f"{fn}: one site whose frame #0 is named {fn}, got {hits} in {s['top']}"):
            continue
        fr = hits[0]
        check(fr["module"].endswith("libnames_lib.so"), f"{fn}: module {fr['module']}")
        check(fr["file"] is not None and os.path.basename(fr["file"]) == "names_lib.cpp" and fr["line"] == line,
              f"{fn}: at names_lib.cpp:{line}, got {fr['file']}:{fr['line']}")
        check(f"names_lib.cpp:{line}" in text and fn in text, f"{fn}: names_lib.cpp:{line} in the text report")


def case_exit(a, tmp):
    """From _exit (maybe in a signal handler that interrupted malloc) libdw,
    which allocates, is not used: the static and hidden functions have no
    name, while the report is written all the same."""
    _, s = run_report([a.prog, "_exit"], tmp, lib=a.lib)
    mine = [row["frames"][0] for row in s["top"] if row["frames"] and row["frames"][0]["module"].endswith("libnames_lib.so")]
    check(len(mine) == 3, f"three sites in libnames_lib.so: {mine}")
    check(all(fr["function"] is None and fr["line"] is None for fr in mine), f"no libdw names from _exit: {mine}")


def run_signalled(argv, tmp, lib):
    """Runs argv, which must end by SIGTERM through lowtide's handler (a hang,
    the failure looked for, ends at the timeout); returns the report's sites."""
    rep = os.path.join(tmp, "r.txt")
    env = clean_env(lib, LOWTIDE_STATS="both", LOWTIDE_SITES="50", LOWTIDE_SITE_SAMPLE="0", LOWTIDE_STATS_FILE=rep)
    try:
        rc, out, err = lttest.run(argv, env, 60, show_failure=True)
    except subprocess.TimeoutExpired:
        check(False, f"{argv}: still running after 60 s (the exit report blocked)")
        return None
    check(rc == -signal.SIGTERM, f"{argv}: ended by SIGTERM, got status {rc}")
    if not check(os.path.exists(rep), "the exit report was written"):
        return None
    with open(rep) as f:
        body = f.read()
    _, _, js = body.partition('{"schema"')
    return json.loads('{"schema"' + js)["sites"]


def case_signal_report(a, tmp):
    """SIGTERM on a thread writing a report, while that report holds libdw's
    Session (raised from the demangler it calls): the handler's exit report
    must not use that Session (libdw allocates, and the interrupted thread's
    Dwfl is half-way through a call): static and hidden functions unnamed."""
    s = run_signalled([a.signal_prog, "report", os.path.join(tmp, "api.txt")], tmp, a.lib)
    if s is None:
        return
    mine = [row["frames"][0] for row in s["top"] if row["frames"] and row["frames"][0]["module"].endswith("libnames_lib.so")]
    check(len(mine) == 3, f"three sites in libnames_lib.so: {mine}")
    check(all(fr["function"] is None and fr["line"] is None for fr in mine), f"no libdw names from the handler: {mine}")


def case_signal_dlopen(a, tmp):
    """SIGTERM while another thread is inside dlopen, the loader's lock held
    by a constructor that waits for a mutex the signalled thread holds: the
    exit report must not wait for the loader's lock (dladdr), and every
    frame is module+offset."""
    s = run_signalled([a.signal_prog, "dlopen", a.plugin], tmp, a.lib)
    if s is None:
        return
    frames = [fr for row in s["top"] for fr in row["frames"]]
    check(len(frames) > 0, "frames in the report")
    check(all(fr["function"] is None for fr in frames), f"module+offset only: {frames}")


def py_rows(s, path):
    return [row for row in s["top"] if row["python"] and row["python"][0]["file"] == path]


def case_python(a, tmp):
    script = os.path.join(a.src, "names_build.py")
    line = marker_line(script, "BUILD-LINE")
    text, s = run_report([PYTHON, script], tmp, lib=a.lib)
    rows = [row for row in py_rows(s, script) if row["python"][0]["line"] == line]
    if check(len(rows) == 1, f"one site at {script}:{line}, got {[r['python'] for r in s['top']]}"):
        py = rows[0]["python"]
        check(py[0]["function"] == "build", f"innermost Python frame is build: {py[0]}")
        check(len(py) >= 2 and py[1]["function"] == "main", f"build's caller main: {py}")
        check(rows[0]["captured"] >= 30, f"the += line's blocks are captured there: {rows[0]['captured']}")
        check(f"py  build at {script}:{line}" in text, "the Python frame in the text report")


def case_pyoff(a, tmp):
    script = os.path.join(a.src, "names_build.py")
    _, s = run_report([PYTHON, script], tmp, lib=a.lib, LOWTIDE_SITES_PYTHON="off")
    check(s["top"] and all(row["python"] == [] for row in s["top"]), "no Python frames with LOWTIDE_SITES_PYTHON=off")


def case_nogil(a, tmp):
    script = os.path.join(a.src, "names_nogil.py")
    _, s = run_report([PYTHON, script], tmp, lib=a.lib)
    ffi = [row for row in s["top"] if any("libffi" in fr["module"] for fr in row["frames"])]
    check(ffi, f"the GIL-free ctypes malloc calls have sites: {[r['frames'][:3] for r in s['top']]}")
    check(all(row["python"] == [] for row in ffi), f"no Python frames without the GIL: {[r['python'] for r in ffi]}")
    held = py_rows(s, script)
    check(any(row["python"][0]["function"] == "<module>" for row in held),
          f"the main thread's bytearrays (GIL held) have their Python line: {[r['python'] for r in s['top']]}")


def run_script(a, tmp, name, **extra):
    """names_<name>.py under lowtide with every call site sampled (a site
    table of 10, or LOWTIDE_SITES in extra): its exit status, stdout and
    stderr, and its report's sites section (None where it wrote none)."""
    rep = os.path.join(tmp, "r.json")
    env = clean_env(a.lib, **{"LOWTIDE_STATS": "json", "LOWTIDE_SITES": "10", "LOWTIDE_SITE_SAMPLE": "0",
                              "LOWTIDE_STATS_FILE": rep, **extra})
    rc, out, err = lttest.run([PYTHON, os.path.join(a.src, f"names_{name}.py")], env, TIMEOUT, show_failure=True)
    sites = None
    if os.path.exists(rep):
        with open(rep) as f:
            sites = json.load(f)["sites"]
    return rc, out, err, sites


def case_stress(a, tmp):
    rc, out, err, s = run_script(a, tmp, "stress", LOWTIDE_SITES="100")
    check(rc == 0 and out.strip() == "ok", f"the script ran through: status {rc}, {out!r}")
    inner = {row["python"][0]["function"].split(".")[-1] for row in s["top"] if row["python"]}
    for fn in ("gen", "handled", "__del__"):
        check(fn in inner, f"a site whose innermost Python frame is {fn}: {sorted(inner)}")


def case_gc(a, tmp):
    rc, out, err, s = run_script(a, tmp, "gc")
    check(rc == 0, f"the script ran through: status {rc}")
    inside, ran = (int(v) for v in out.split())
    check(ran == 20, f"every cycle's finalizer ran: {ran}")
    check(inside == 0, f"no finalizer ran inside a captured malloc (a collection started there): {inside} did")
    check(any(row["python"] and row["python"][0]["function"] == "grow" for row in s["top"]),
          f"the += has its Python frames: {[r['python'] for r in s['top']]}")


def case_arena(a, tmp):
    rc, out, err, s = run_script(a, tmp, "arena", LOWTIDE_CUTOFF="4KiB")
    check(rc == 0 and out.strip() == "ok 200000",
          f"the script ran through (no capture allocated inside pymalloc's realloc of its arenas): status {rc}, {out!r}")
    if rc == 0:
        fill = [row for row in s["top"] if row["python"] and row["python"][0]["function"] == "fill"]
        check(fill, f"a site whose innermost Python frame is fill: {[r['python'] for r in s['top']]}")
        check(all(row["python"][0]["file"] == "?" for row in fill),
              f"fill's file name, a lone surrogate, is '?': {[r['python'] for r in fill]}")


def case_unicode(a, tmp):
    rc, out, err, s = run_script(a, tmp, "unicode")
    check(rc == 0, f"the script ran through: status {rc}, {err[-2000:]!r}")
    path, func, qual = out.splitlines()
    inner = {row["python"][0]["function"]: row["python"][0]["file"] for row in s["top"] if row["python"]}
    check(func in inner, f"{func!r} named whole: {sorted(inner)}")
    # The head of the qualified name, cut between characters, in 95 bytes.
    heads = [n for n in inner if qual.startswith(n) and len(n) < len(qual)]
    check(len(heads) == 1 and 90 <= len(heads[0].encode()) <= 95, f"the head of {qual!r}: {sorted(inner)}")
    # The end of the path after "...", cut between characters, in 159 bytes.
    for name in [func] + heads:
        file = inner.get(name, "")
        check(file.startswith("...") and path.endswith(file[3:]) and 150 <= len(file.encode()) <= 159,
              f"{name}'s file is the end of {path!r}: {file!r}")


CASES = {"arena": case_arena, "unicode": case_unicode, "gc": case_gc, "static": case_static, "exit": case_exit, "python": case_python, "pyoff": case_pyoff, "nogil": case_nogil,
         "stress": case_stress, "signal_report": case_signal_report, "signal_dlopen": case_signal_dlopen}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--lib", required=True)
    ap.add_argument("--prog", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--signal-prog", required=True)
    ap.add_argument("--plugin", required=True)
    a = ap.parse_args()
    lttest.run_case(CASES[a.case], a, "lowtide-names-")
    return 0


if __name__ == "__main__":
    sys.exit(main())
