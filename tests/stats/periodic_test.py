"""Periodic reports (LOWTIDE_STATS_INTERVAL), the Prometheus report, and the
report of a process ended by SIGTERM or SIGINT (docs/report.md). One case
per meson test:

  periodic_test.py CASE --lib LIB --prog PERIODIC_PROG --def LOWTIDE_STATS_DEF

Every child run is bounded by a timeout, every wait by a deadline."""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lttest  # noqa: E402
from lttest import check, clean_env  # noqa: E402
from check_report import check_schema, hist  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

TIMEOUT = 60


def run(argv, env):
    return lttest.run(argv, env, TIMEOUT)


def def_rows(path):
    """lowtide_stats.def's rows: (name, kind, unit, object, key)."""
    rows = []
    with open(path) as f:
        for m in re.finditer(r'^LOWTIDE_STAT\((\w+),\s*(\w+),\s*(\w+),\s*(\w+),\s*"(\w*)"', f.read(), re.M):
            rows.append(m.groups())
    check(len(rows) >= 28, f"read the table: {len(rows)} rows")
    return rows


# --- periodic -----------------------------------------------------------------


def check_live(r, pid):
    """check_schema for a report taken while threads allocate: each thread's
    counters are read without stopping it, so a thread's call counts and its
    histogram may differ by the calls it made while they were read. lowtide
    reads the counters before and after the histogram and keeps the reading
    closest to it, re-reading until one is within a call (at most 256
    passes), which leaves the call in flight, one per thread running: the
    living rows, and the one short-lived thread periodic_prog runs at a
    time, which may be past its exit destructor (its row no longer "alive")
    while its last call is counted. Until 2026-12-05 it kept the last of
    four passes (off by 115-247 on 1.5 M calls under load), and until
    2026-12-06 the pass whose counters moved least, accepted within 64
    calls (the UBSan build in CI: off by 7 on 31,307 calls, 4 of 40 runs
    past the calls in flight beside two busy loops; docs/reliability.md,
    no. 26). With the closest reading, beside four busy loops: at most 2
    calls off in 90 runs (60 UBSan, 30 release), none past the calls in
    flight. So the slack: the calls in flight, and 1 in 20,000 for a slot
    whose 256 passes were all torn. A call path that skips the histogram
    would be off by its share of the calls (a third or more: the four
    families), far past that; everything else is exact."""
    calls = sum(r["totals"]["calls"][k] for k in ("malloc", "calloc", "realloc", "aligned"))
    counted = sum(h["count"] for h in r["histogram"])
    running = sum(1 for t in r["threads"] if t["alive"]) + 1
    slack = running + calls // 20000
    check(abs(calls - counted) <= slack, f"histogram {counted} vs calls {calls}: within {slack} (calls in flight)")
    r = json.loads(json.dumps(r))
    if r["histogram"]:  # the difference onto the fullest class, which stays above 0
        max(r["histogram"], key=lambda h: h["count"])["count"] += calls - counted
    check_schema(r, pid=pid)



def case_interval(a, tmp):
    """The report file is rewritten while the program runs, and is a whole,
    parseable report, never partial, at every read; the exit-time report
    comes last and includes what was done after the last periodic one."""
    path = os.path.join(tmp, "r.json")
    extra = 5000
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=path, LOWTIDE_STATS_INTERVAL="100ms")
    p = subprocess.Popen([a.prog, "spin", "2.5", str(extra)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    reads, uptimes, mallocs, small, bad = 0, [], [], [], []
    deadline = time.monotonic() + TIMEOUT
    while p.poll() is None and time.monotonic() < deadline:
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError:
            continue
        reads += 1
        try:
            r = json.loads(text)
        except ValueError as e:
            bad.append(f"{e}: {text[-200:]!r}")
            continue
        if r["partial"] or r["truncated"]:
            bad.append(f"partial {r['partial']} truncated {r['truncated']}")
        if not uptimes or r["uptime_s"] != uptimes[-1]:
            uptimes.append(r["uptime_s"])
            mallocs.append(r["totals"]["calls"]["malloc"])
            small.append(hist(r, 16))
            check_live(r, p.pid)
    out, err = p.communicate(timeout=TIMEOUT)
    check(p.returncode == 0, f"exit status {p.returncode}: {err[-2000:]!r}")
    check(err == b"", f"nothing on stderr: {err[-500:]!r}")
    check(not bad, f"every read a whole report: {len(bad)} of {reads} were not: {bad[:3]}")
    # 2.5 s at 100 ms: about 25 reports; a loaded machine may miss some reads.
    check(len(uptimes) >= 8, f"the file was rewritten: {len(uptimes)} distinct reports in {reads} reads")
    check(uptimes == sorted(uptimes) and mallocs == sorted(mallocs), f"reports in order: {uptimes}")
    final = json.load(open(path))
    check_schema(final, pid=p.pid)
    check(final["uptime_s"] >= uptimes[-1] if uptimes else False, "the exit-time report is the last one")
    # The last mallocs are the program's only ones of 16-31 bytes (24), so
    # that class shows them whenever a periodic report was taken (a loaded
    # machine may take one while they run): the exit-time report has them
    # all on top of what the first periodic one, 2.4 s before, had.
    n = final["totals"]["calls"]["malloc"]
    check(all(m <= n for m in mallocs), f"the exit-time report has every malloc: {n} vs {mallocs[-3:]}")
    check(hist(final, 16) >= (small or [0])[0] + extra,
          f"the exit-time report has the last {extra} mallocs: [16, 32) {hist(final, 16)} vs {small[:3]} first")
    check(os.listdir(tmp) == ["r.json"], f"no temporary file left: {os.listdir(tmp)}")


def case_live_reports(a, tmp):
    """Reports written while two threads malloc and free in a tight loop,
    the hardest case for reading counters their owners are writing: every
    report whole and consistent (check_live)."""
    n = 200
    rc, _, err = run([a.prog, "live", tmp, str(n)], clean_env(a.lib))
    check(rc == 0, f"exit status {rc}: {err[-2000:]!r}")
    last = 0
    for i in range(n):
        with open(os.path.join(tmp, f"r{i}.json")) as f:
            r = json.load(f)
        check_live(r, None)
        calls = r["totals"]["calls"]["malloc"]
        check(calls > last, f"report {i} after report {i - 1}: {calls} mallocs, then {last}")
        last = calls


def case_interval_prom(a, tmp):
    """A .prom file, rewritten every interval, parses at every read."""
    path = os.path.join(tmp, "lowtide.prom")
    env = clean_env(a.lib, LOWTIDE_STATS="on", LOWTIDE_STATS_FILE=path, LOWTIDE_STATS_INTERVAL="100ms")
    p = subprocess.Popen([a.prog, "spin", "1.5", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen, reads = set(), 0
    deadline = time.monotonic() + TIMEOUT
    while p.poll() is None and time.monotonic() < deadline:
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError:
            continue
        reads += 1
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        check("lowtide_uptime_seconds" in fams and "lowtide_malloc_calls" in fams,
              f"a whole exposition at read {reads}")
        if "lowtide_uptime_seconds" in fams:
            seen.add(fams["lowtide_uptime_seconds"].samples[0].value)
    p.communicate(timeout=TIMEOUT)
    check(p.returncode == 0, f"exit status {p.returncode}")
    check(len(seen) >= 5, f"rewritten: {len(seen)} distinct reports in {reads} reads")


def case_interval_unwritable(a, tmp):
    """A periodic report that cannot be written warns once and is not
    dumped on stderr every interval; the exit-time report still falls back
    to stderr, as always."""
    path = os.path.join(tmp, "no-such-dir", "r.json")
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=path, LOWTIDE_STATS_INTERVAL="100ms")
    rc, out, err = run([a.prog, "spin", "1", "0"], env)
    check(rc == 0, f"exit status {rc}")
    warnings = [ln for ln in err.splitlines() if ln.startswith("lowtide: warning:")]
    want = [f"lowtide: warning: cannot write the periodic report to '{path}' (No such file or directory); "
            "not retried on stderr, the exit-time report will be",
            f"lowtide: warning: cannot write the report to '{path}' (No such file or directory); "
            "writing it to stderr instead"]
    check(warnings == want, f"one warning for the periodic reports, one for the exit-time one: {warnings}")
    check(err.count('"schema": "lowtide-report"') == 1, "only the exit-time report on stderr")


def case_bad_interval(a, tmp):
    for value, why in (("20ms", "below the minimum"), ("2d", "not a duration (e.g. 500ms, 10s, 2m; a bare number is milliseconds)"),
                       ("-1s", "not a duration (e.g. 500ms, 10s, 2m; a bare number is milliseconds)"),
                       ("25h", "above the maximum")):
        env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json"),
                        LOWTIDE_STATS_INTERVAL=value)
        rc, out, err = run([a.prog, "spin", "0.3", "0"], env)
        check(rc == 0, f"{value}: exit status {rc}")
        lines = err.splitlines()
        check(len(lines) == 1, f"{value}: one warning line: {lines}")
        want = (f"lowtide: warning: LOWTIDE_STATS_INTERVAL='{value}' is {why} (valid: off or 100 ms to 24 h); "
                "using the default off")
        check(lines == [want], f"{value}: {lines} != {[want]}")
        check(os.path.exists(os.path.join(tmp, "r.json")), f"{value}: the exit-time report is still written")
    # Set with the report off: one line says it does nothing.
    env = clean_env(a.lib, LOWTIDE_STATS_INTERVAL="1s")
    rc, out, err = run([a.prog, "spin", "0.1", "0"], env)
    check(rc == 0 and err.splitlines() == ["lowtide: warning: LOWTIDE_STATS_INTERVAL=1 s has no effect: "
                                           "LOWTIDE_STATS is off (set it to text, json, both or prometheus)"],
          f"interval with the report off: {err!r}")


# The report thread names itself once it runs (periodic.cpp, report_main),
# a moment after lowtide starts it (at start; in a child, in fork's child
# handler): a look right away may find it still under the program's name
# (periodic_fork failed so, "parent []", in the main build, 1 run of ~10
# here). So a thread that should be there is waited for, up to 20 s; the
# child of the name without %p is looked at after 0.35 s, by which time a
# thread started there would have named itself.
PY_FORK = r"""
import os, sys, time
def threads():
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return sorted(n for n in names if n == "lowtide-report")
def named():
    end = time.monotonic() + 20
    while not threads() and time.monotonic() < end:
        time.sleep(0.01)
    return threads()
print("parent", named(), flush=True)
pid = os.fork()
if pid == 0:
    if sys.argv[1] == "1":
        print("child", named(), flush=True)
    else:
        time.sleep(0.35)
        print("child", threads(), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def case_fork(a, tmp):
    """The thread is not copied by fork: a forked child that writes its own
    report (%p) starts its own; one that writes none (no %p) has no thread."""
    for name, child_has in (("r.%p.json", True), ("r.json", False)):
        env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=os.path.join(tmp, name),
                        LOWTIDE_STATS_INTERVAL="100ms")
        rc, out, err = run(["/usr/bin/python3", "-c", PY_FORK, "1" if child_has else "0"], env)
        check(rc == 0 and err == "", f"{name}: status {rc}, stderr {err!r}")
        want = ("parent ['lowtide-report']\nchild " + ("['lowtide-report']" if child_has else "[]") + "\n")
        check(out == want, f"{name}: threads {out!r}, want {want!r}")
        files = sorted(os.listdir(tmp))
        check(len(files) == (2 if child_has else 1), f"{name}: reports {files}")
        for f in files:
            check_schema(json.load(open(os.path.join(tmp, f))))
            os.unlink(os.path.join(tmp, f))


# --- Prometheus ---------------------------------------------------------------

NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def check_exposition(text, pid):
    """The Prometheus text format, strictly: the client library's parser
    reads it; each family has one HELP and one TYPE line before its samples;
    names follow the conventions; every sample has pid="<pid>". Returns
    {sample name: value}."""
    fams = list(text_string_to_metric_families(text))
    check(len(fams) > 0, "families parsed")
    helps, types, samples = {}, {}, {}
    current = None
    for line in text.splitlines():
        check(line != "" and not line.endswith(" "), f"no blank line or trailing space: {line!r}")
        if line.startswith("# HELP "):
            name, _, doc = line[7:].partition(" ")
            check(name not in helps and doc != "", f"one non-empty HELP for {name}")
            helps[name] = doc
            current = name
        elif line.startswith("# TYPE "):
            name, _, typ = line[7:].partition(" ")
            check(name == current and name not in types, f"TYPE {name} right after its HELP")
            types[name] = typ
        else:
            m = re.fullmatch(r'(\w+)\{pid="(\d+)"(?:,version="[^"]+")?\} (\S+)', line)
            check(m is not None, f"sample line {line!r}")
            if m:
                check(m.group(1) == current, f"sample {m.group(1)} under its own HELP/TYPE")
                check(int(m.group(2)) == pid, f"pid label {m.group(2)} != {pid}")
                check(m.group(1) not in samples, f"{m.group(1)} once")
                samples[m.group(1)] = float(m.group(3))
    for name, typ in types.items():
        check(NAME_RE.match(name) is not None and name.startswith("lowtide_"), f"name {name}")
        check(typ in ("counter", "gauge"), f"{name} type {typ}")
        check((typ == "counter") == name.endswith("_total"), f"{name}: counters and only counters end in _total")
    check(set(helps) == set(types) == set(samples), "HELP, TYPE and a sample for every family")
    parsed = {s.name: s.value for f in fams for s in f.samples}
    check(parsed == samples, "the client parser reads the same samples")
    return samples, types


def prom_counter(row):
    """A Prometheus counter: a COUNTER row, or a byte-seconds integral
    (which only goes up, though the table reads it process-wide)."""
    return row[1] == "COUNTER" or row[2] == "BYTE_S"


def prom_name(row):
    name, kind, unit, _, _ = row
    bytes_ = unit == "BYTES" and not name.endswith("_bytes")
    return "lowtide_" + name + ("_bytes" if bytes_ else "") + ("_total" if prom_counter(row) else "")


def json_value(r, row):
    _, _, _, obj, key = row
    return {"totals_calls": lambda: r["totals"]["calls"][key], "totals_small": lambda: r["totals"]["small"][key],
            "totals_large": lambda: r["totals"]["large"][key], "large": lambda: r["large"][key],
            "small": lambda: r["small"][key], "none": lambda: None}[obj]()


def case_prom(a, tmp):
    """Every row of lowtide_stats.def is a metric, named by the conventions,
    with the value the JSON report of the same moment has."""
    jpath, ppath = os.path.join(tmp, "r.json"), os.path.join(tmp, "r.txt")
    env = clean_env(a.lib, LOWTIDE_CACHE="0")
    p = subprocess.run([a.prog, "twice", jpath, ppath], env=env, timeout=TIMEOUT, capture_output=True)
    check(p.returncode == 0, f"exit status {p.returncode}: {p.stderr[-1000:]!r}")
    pid = int(p.stdout)
    r = json.load(open(jpath))
    check_schema(r, pid=pid)
    samples, types = check_exposition(open(ppath).read(), pid)
    rows = def_rows(a.def_)
    for row in rows:
        name = prom_name(row)
        check(name in samples, f"{row[0]} is {name}")
        check(types.get(name) == ("counter" if prom_counter(row) else "gauge"), f"{name}'s type")
        if row[2] == "BYTES":
            check(name.endswith("_bytes") or name.endswith("_bytes_total"), f"{name}: bytes say so")
        want = json_value(r, row)
        if want is not None:
            check(samples.get(name) == want, f"{name} = {samples.get(name)}, the JSON report's {want}")
    # The two names the docs quote.
    check(types.get("lowtide_large_live_bytes") == "gauge", "lowtide_large_live_bytes gauge")
    check(types.get("lowtide_large_maps_total") == "counter", "lowtide_large_maps_total counter")
    check(types.get("lowtide_large_cached_byte_seconds_total") == "counter",
          "the cache's byte-seconds, which only go up, a counter")
    check(samples.get("lowtide_large_maps_total", 0) >= 3, "the program's large blocks counted")
    check(samples.get("lowtide_resident_bytes", 0) > 0 and samples.get("lowtide_peak_resident_bytes", 0)
          >= samples.get("lowtide_resident_bytes", 0), "resident set")
    check(samples.get("lowtide_report_partial") == 0, "not partial")
    table = {prom_name(row) for row in rows}
    extra = set(samples) - table
    check(extra == {"lowtide_info", "lowtide_resident_bytes", "lowtide_peak_resident_bytes",
                    "lowtide_memory_limit_bytes", "lowtide_uptime_seconds", "lowtide_reports_dropped_total",
                    "lowtide_report_partial"}, f"the metrics beyond the table: {sorted(extra)}")


def case_prom_exit(a, tmp):
    """The exit-time report: a .prom name picks the format whatever
    LOWTIDE_STATS says; LOWTIDE_STATS=prometheus picks it for any name."""
    for stats, name in (("json", "r.prom"), ("both", "r.prom"), ("prometheus", "r.%p.metrics")):
        path = os.path.join(tmp, name)
        env = clean_env(a.lib, LOWTIDE_STATS=stats, LOWTIDE_STATS_FILE=path)
        p = subprocess.run([a.prog, "spin", "0.2", "10"], env=env, timeout=TIMEOUT, capture_output=True)
        check(p.returncode == 0 and p.stderr == b"", f"{stats} {name}: exit status {p.returncode} {p.stderr!r}")
        files = os.listdir(tmp)
        check(len(files) == 1, f"{stats} {name}: one file {files}")
        if files:
            written = os.path.join(tmp, files[0])
            pid = int(re.search(r'pid="(\d+)"', open(written).read()).group(1))
            samples, _ = check_exposition(open(written).read(), pid)
            check(samples.get("lowtide_malloc_calls_total", 0) >= 10, f"{stats} {name}: counted")
            os.unlink(written)


# --- signals ------------------------------------------------------------------


def start(a, env, mode, *args):
    p = subprocess.Popen([a.prog, mode, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=env.pop("_preexec", None))
    first = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        line = p.stdout.readline().decode()
        if not line or line == "ready\n":
            break
        first.append(line)
    return p, first


def finish(p):
    out, err = p.communicate(timeout=TIMEOUT)
    return p.returncode, out.decode(), err.decode()


def case_signals(a, tmp):
    """Killed by SIGTERM or SIGINT under the default action: the report is
    written and the wait status is the one the program has without lowtide;
    the program sees SIG_DFL whichever way it asks."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        statuses = {}
        for preload in (False, True):
            path = os.path.join(tmp, f"r.{sig.name}.json")
            env = clean_env(a.lib if preload else None, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=path)
            p, first = start(a, env, "wait")
            time.sleep(0.05)
            p.send_signal(sig)
            rc, out, err = finish(p)
            statuses[preload] = (rc, first)
            check(err == "", f"{sig.name} preload={preload}: stderr {err!r}")
            if preload:
                check(os.path.exists(path), f"{sig.name}: report written")
                if os.path.exists(path):
                    check_schema(json.load(open(path)), pid=p.pid)
            else:
                check(not os.path.exists(path), "no report without lowtide")
        check(statuses[False][0] == -sig, f"{sig.name} without lowtide: {statuses[False]}")
        check(statuses[True] == statuses[False], f"{sig.name}: same status and dispositions with lowtide: "
                                                 f"{statuses[True]} vs {statuses[False]}")
    check(statuses[True][1] == ["SIGTERM sigaction=SIG_DFL signal=SIG_DFL flags=0\n",
                                "SIGINT sigaction=SIG_DFL signal=SIG_DFL flags=0\n"],
          f"dispositions as the program sees them: {statuses[True][1]}")


def case_signals_own(a, tmp):
    """A handler of the program's own, installed after lowtide's start,
    replaces lowtide's (the program's handler runs, ours does not); SIG_DFL
    set back by the handler before it re-raises, or by SA_RESETHAND, brings
    lowtide's back (the report is written, the status is the signal's); an
    inherited SIG_IGN stays."""
    path = os.path.join(tmp, "r.json")
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=path)
    p, first = start(a, env, "own")
    time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    rc, out, err = finish(p)
    check(first == ["old=SIG_DFL\n"], f"the program's sigaction sees SIG_DFL as the old action: {first}")
    check(rc == 7 and out == "handled\n", f"the program's handler ran: status {rc}, stdout {out!r}")
    check(os.path.exists(path), "its _exit wrote the report (lowtide's _exit, not the signal handler)")
    os.unlink(path)

    # resethand: installed with SA_RESETHAND (Node.js's handler), which the
    # kernel resets to the real SIG_DFL at delivery, past lowtide's sigaction.
    for how in ("sigaction", "signal", "resethand"):
        for preload in (False, True):
            env = clean_env(a.lib if preload else None, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=path)
            p, first = start(a, env, "reraise", how)
            time.sleep(0.05)
            p.send_signal(signal.SIGTERM)
            rc, out, err = finish(p)
            check(rc == -signal.SIGTERM and out == "handled\n", f"reraise {how} preload={preload}: {rc} {out!r}")
            check(os.path.exists(path) == preload, f"reraise {how} preload={preload}: report written iff lowtide")
            if os.path.exists(path):
                os.unlink(path)

    def ignore():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for preload in (False, True):
        env = clean_env(a.lib if preload else None, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=path)
        env["_preexec"] = ignore
        p, first = start(a, env, "wait")
        p.send_signal(signal.SIGTERM)
        rc, out, err = finish(p)
        check(rc == 0, f"inherited SIG_IGN preload={preload}: SIGTERM ignored, status {rc}")
        check(first[0].startswith("SIGTERM sigaction=SIG_IGN signal=SIG_IGN"), f"SIG_IGN seen: {first}")
        check(os.path.exists(path) == preload, "the normal exit's report")
        if os.path.exists(path):
            os.unlink(path)


PY_SIGNALS = r"""
import os, signal, sys, time
print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, signal.getsignal(signal.SIGINT) is signal.default_int_handler)
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
    print("no KeyboardInterrupt")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
sys.stdout.flush()
os.kill(os.getpid(), signal.SIG%s)
time.sleep(5)
"""


def case_python_signals(a, tmp):
    """Python installs its SIGINT handler after lowtide's start when it finds
    SIG_DFL there: it still does (KeyboardInterrupt unchanged), and an
    uncaught KeyboardInterrupt (Python then dies by SIGINT) or a SIGTERM
    still writes the report, with the status Python has without lowtide."""
    for sig in ("INT", "TERM"):
        results = {}
        for preload in (False, True):
            path = os.path.join(tmp, "r.json")
            env = clean_env(a.lib if preload else None, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=path)
            rc, out, err = run(["/usr/bin/python3", "-c", PY_SIGNALS % sig], env)
            results[preload] = (rc, out)
            check(os.path.exists(path) == preload, f"SIG{sig} preload={preload}: report iff lowtide")
            if preload and os.path.exists(path):
                check_schema(json.load(open(path)))
                os.unlink(path)
        check(results[False] == ((-signal.SIGINT if sig == "INT" else -signal.SIGTERM),
                                 "True True\nKeyboardInterrupt\n"), f"SIG{sig} without lowtide: {results[False]}")
        check(results[True] == results[False], f"SIG{sig}: the same with lowtide: {results[True]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--lib", required=True)
    ap.add_argument("--prog", required=True)
    ap.add_argument("--def", dest="def_", required=True)
    a = ap.parse_args()
    lttest.run_case(globals()["case_" + a.case], a, "lowtide-periodic-")


if __name__ == "__main__":
    sys.exit(main())
