"""Runs a program under lowtide with the exit-time report switched on and
checks what lowtide wrote. One case per meson test:

  check_report.py CASE --lib LIB [--counts EXE] [--procs EXE] [--workload PY]

The programs run with a clean LOWTIDE_* environment (the variables of this
process, including LOWTIDE_OWNER_PID, are dropped) so each case sets exactly
what it tests. Every child run is bounded by a timeout."""
import argparse
import json
import os
import re
import stat
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env  # noqa: E402


TIMEOUT = 150
MiB = 1 << 20
DEFAULT_CUTOFF = 128 << 10


def run(argv, env, cwd=None):
    return lttest.run(argv, env, TIMEOUT, show_failure=True, cwd=cwd)


def load(path):
    with open(path) as f:
        return json.load(f)


CALLS = ["malloc", "calloc", "realloc", "aligned", "free"]

DEF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "lowtide", "lowtide_stats.def")


def stats_table():
    """The rows of include/lowtide/lowtide_stats.def, as dicts, in file order:
    the text report's labels and units come from there."""
    rows = []
    pat = re.compile(r'LOWTIDE_STAT\((\w+),\s*(\w+),\s*(\w+),\s*(\w+),\s*"([^"]*)",\s*(\d+),\s*"([^"]*)",\s*"(.*)"\)\s*$')
    with open(DEF) as f:
        for line in f:
            if line.startswith("LOWTIDE_STAT("):
                m = pat.match(line)
                check(m is not None, f"lowtide_stats.def row {line!r}")
                name, kind, unit, obj, key, pos, label, meaning = m.groups()
                rows.append(dict(name=name, kind=kind, unit=unit, object=obj, key=key, pos=int(pos), label=label))
    check(len(rows) > 20, f"{len(rows)} rows in lowtide_stats.def")
    return rows


def in_object(rows, obj):
    return sorted((r for r in rows if r["object"] == obj), key=lambda r: r["pos"])


UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def bytes_close(text, value):
    """Whether the report's human size `text` ("36.9 MiB", "0 B") shows
    `value` bytes: rounded to one decimal of its unit."""
    m = re.fullmatch(r"(\d+(?:\.\d)?) (B|KiB|MiB|GiB|TiB)", text)
    if m is None:
        return False
    return abs(float(m.group(1)) * UNITS[m.group(2)] - value) <= 0.05 * UNITS[m.group(2)] + 0.5
PATH_KEYS = ["requested", "out", "freed", "live"]
LARGE_KEYS = ["maps", "unmaps", "in_place", "remaps", "remap_bytes", "copies", "copy_bytes", "returned_bytes",
              "cross_up", "cross_down", "fallback", "reused", "cached_frees", "cached_bytes", "live", "peak_live",
              "released_at_free", "released_decay", "released_demand", "released_limit", "released_room",
              "cached_peak", "cached_byte_seconds", "grown_into_cache", "warm_misses", "populated"]
SMALL_KEYS = ["trims", "trim_dropped"]


def check_schema(r, pid=None):
    """Every field docs/report.md describes, with its type; totals are the
    sums of the rows; the histogram's counts add up to the allocating calls."""
    check(list(r.keys()) == ["schema", "schema_version", "version", "pid", "command", "cutoff", "uptime_s",
                             "partial", "truncated", "reports_dropped", "unreported_children", "process", "totals", "large", "small", "threads", "histogram", "sites"],
          f"top-level keys {list(r.keys())}")
    check(r["schema"] == "lowtide-report" and r["schema_version"] == 1, "schema, schema_version")
    check(re.fullmatch(r"\d+\.\d+\.\d+", r["version"]) is not None, f"version {r['version']!r}")
    check(isinstance(r["pid"], int) and (pid is None or r["pid"] == pid), f"pid {r['pid']} != {pid}")
    check(isinstance(r["command"], str) and r["command"] != "", "command")
    check(r["cutoff"] == DEFAULT_CUTOFF, f"cutoff {r['cutoff']} (LOWTIDE_CUTOFF's default is 128 KiB)")
    check(isinstance(r["uptime_s"], (int, float)) and r["uptime_s"] >= 0, "uptime_s")
    check(r["partial"] is False, "partial is false")
    check(r["truncated"] is False, "truncated is false")
    check(r["reports_dropped"] == 0, "no report dropped")
    check(list(r["process"].keys()) == ["peak_rss", "rss", "live_small", "live_large", "returned_to_os",
                                        "limit", "limit_source", "cache_cap"],
          "process keys")
    # The memory limit: these runs set no LOWTIDE_LIMIT, so it is the cgroup's
    # (none on most machines); tests/memory/mem_limit.cpp checks "env" and
    # "cgroup_v2" with the values it sets.
    check(isinstance(r["process"]["limit"], int) and r["process"]["limit"] >= 0
          and r["process"]["limit_source"] in ("none", "cgroup_v2", "cgroup_v1")
          and (r["process"]["limit"] == 0) == (r["process"]["limit_source"] == "none"),
          f"limit {r['process']['limit']} from {r['process']['limit_source']!r}")
    check(r["process"]["peak_rss"] >= r["process"]["rss"] > 0, "peak_rss >= rss > 0")
    # The cap LOWTIDE_CACHE set (tests/memory/mem_limit.cpp checks "auto"'s
    # value); the cache never holds more.
    check(isinstance(r["process"]["cache_cap"], int) and r["process"]["cache_cap"] >= 0, "cache_cap")
    t = r["totals"]
    check(list(t.keys()) == ["calls", "small", "large"] and list(t["calls"].keys()) == CALLS
          and list(t["small"].keys()) == PATH_KEYS and list(t["large"].keys()) == PATH_KEYS, "totals keys")
    check(list(r["large"].keys()) == LARGE_KEYS, "large keys")
    why = sum(r["large"][k] for k in LARGE_KEYS if k.startswith("released_"))
    check(why == r["large"]["returned_bytes"], f"released by reason add up to returned_bytes: {why} {r['large']}")
    check(r["large"]["cached_peak"] >= r["large"]["cached_bytes"], "cached_peak >= cached_bytes")
    check(r["large"]["cached_bytes"] <= r["process"]["cache_cap"], "cached_bytes <= the cap")
    rows = r["threads"]
    check(len(rows) >= 1, "at least one thread row")
    for row in rows:
        check(list(row.keys()) == ["tid", "name", "alive", "folded", "calls", "small", "large"], f"row keys {row}")
        check(isinstance(row["alive"], bool) and isinstance(row["name"], str), "row types")
        for path in ("small", "large"):
            check(row[path]["live"] == row[path]["out"] - row[path]["freed"], f"row {row['name']} {path} live")
    # totals are exact: the sum of the rows
    for k in CALLS:
        check(t["calls"][k] == sum(row["calls"][k] for row in rows), f"totals.calls.{k} = sum of rows")
    for path in ("small", "large"):
        for k in PATH_KEYS:
            check(t[path][k] == sum(row[path][k] for row in rows), f"totals.{path}.{k} = sum of rows")
    check(r["process"]["live_small"] == t["small"]["live"], "process.live_small = totals.small.live")
    check(r["process"]["live_large"] == t["large"]["live"], "process.live_large = totals.large.live")
    check(r["process"]["returned_to_os"] == r["large"]["returned_bytes"], "returned_to_os = large.returned_bytes")
    check(r["large"]["peak_live"] >= r["large"]["live"], "peak_live >= live")
    check(list(r["small"].keys()) == SMALL_KEYS, f"small keys {list(r['small'].keys())}")
    check(all(isinstance(r["small"][k], int) and r["small"][k] >= 0 for k in SMALL_KEYS), f"small {r['small']}")
    check(r["small"]["trims"] > 0 or r["small"]["trim_dropped"] == 0, f"bytes dropped without a trim: {r['small']}")
    # histogram: power-of-two classes, ascending, one entry per allocating call
    prev = -1
    for h in r["histogram"]:
        ok = (h["min"] == 0 and h["max"] == 1) or (h["min"] > 0 and h["max"] == 2 * h["min"]
                                                    and h["min"] & (h["min"] - 1) == 0)
        check(ok and h["min"] > prev and h["count"] > 0, f"histogram class {h}")
        prev = h["min"]
    check(sum(h["count"] for h in r["histogram"]) == sum(t["calls"][k] for k in CALLS[:4]),
          "histogram counts = malloc+calloc+realloc+aligned calls")


def hist(r, lo):
    return sum(h["count"] for h in r["histogram"] if h["min"] == lo)


def only_file(tmp):
    names = sorted(os.listdir(tmp))
    check(len(names) == 1, f"exactly one file written, got {names}")
    return os.path.join(tmp, names[0]) if names else None


# --- cases ------------------------------------------------------------------


def case_counts(a, tmp):
    # Strict return-at-free (no reuse cache, so no decay thread whose creation
    # would allocate on a counted thread): every count is exact.
    rc, out, err = run([a.counts, "counts"], clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_CACHE="0",
                                                       LOWTIDE_STATS_FILE=os.path.join(tmp, "r.%p.json")))
    check(rc == 0, f"exit status {rc}")
    did = json.loads(out)
    path = only_file(tmp)
    r = load(path)
    check_schema(r)
    check(os.path.basename(path) == f"r.{r['pid']}.json", "%p expanded to the pid")
    check(r["command"].endswith("report_counts counts"), f"command {r['command']!r}")
    rows = {}
    for row in r["threads"]:
        rows.setdefault(row["name"], []).append(row)
    total = {k: 0 for k in CALLS}
    for name, d in did["threads"].items():
        check(len(rows.get(name, [])) == 1, f"one row named {name}")
        if len(rows.get(name, [])) != 1:
            continue
        row = rows[name][0]
        check(row["alive"] is False and row["folded"] == 0 and row["tid"] != r["pid"], f"{name}: exited, own tid")
        for k in CALLS:
            check(row["calls"][k] == d[k], f"{name}: calls.{k} {row['calls'][k]} == {d[k]}")
            total[k] += d[k]
        check(row["small"]["requested"] == d["small_requested"], f"{name}: small.requested")
        check(row["small"]["out"] == d["small_out"], f"{name}: small.out = sum of usable sizes")
        check(row["small"]["freed"] == d["small_out"] and row["small"]["live"] == 0, f"{name}: small all freed")
        check(row["large"]["requested"] == d["large_requested"], f"{name}: large.requested")
        check(row["large"]["out"] == d["large_out"], f"{name}: large.out = sum of usable sizes")
        check(row["large"]["freed"] == d["large_out"] and row["large"]["live"] == 0, f"{name}: large all freed")
    check(len({row["tid"] for row in r["threads"]}) == len(r["threads"]), "distinct tids")
    for k in CALLS:
        check(r["totals"]["calls"][k] >= total[k], f"totals.calls.{k} >= the named threads'")
    check(total["malloc"] == 11000 and total["calloc"] == 21 and total["realloc"] == 45 and total["aligned"] == 33
          and total["free"] == 11054, f"the program did what it should: {total}")
    L, usable, big = r["large"], did["large_usable"], did["large_block"]
    check(L["maps"] >= 1000 and L["unmaps"] == L["maps"], f"large maps {L['maps']} >= 1000, all unmapped")
    check(L["live"] == 0 and r["process"]["live_large"] == 0 and r["totals"]["large"]["live"] == 0,
          "nothing large live at exit")
    check(L["peak_live"] >= 3 * did["batch"] * usable, f"peak_live {L['peak_live']} >= 30 blocks live at once")
    check(r["process"]["returned_to_os"] >= 1000 * big, "returned_to_os >= 1000 x 2 MiB")
    check(r["totals"]["large"]["requested"] >= 1000 * big, "large requested >= 1000 x 2 MiB")
    check(hist(r, big) >= 1000, f"histogram [2 MiB, 4 MiB) >= 1000: {hist(r, big)}")
    check(hist(r, 64) >= 10000 + 3 * (7 + 3 + 2), f"histogram [64, 128) >= 10036: {hist(r, 64)}")
    check(hist(r, 128) >= 15 and hist(r, 256) >= 15 and hist(r, 512) >= 18, "histogram: reallocs and aligned")
    check(hist(r, 0) >= 15, "histogram [0, 1): realloc(p, 0)")


def case_live5(a, tmp):
    rc, out, err = run([a.counts, "live5"], clean_env(a.lib, LOWTIDE_STATS="json",
                                                      LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}")
    did = json.loads(out)
    r = load(only_file(tmp))
    check_schema(r)
    want = did["live_usable"]
    check(r["process"]["live_large"] == want, f"process.live_large {r['process']['live_large']} == {want}")
    check(r["large"]["live"] == want, f"large.live {r['large']['live']} == {want}")
    check(r["totals"]["large"]["live"] == want, "totals.large.live")
    check(r["large"]["maps"] - r["large"]["unmaps"] == 5, "5 blocks mapped and not released")
    main = [row for row in r["threads"] if row["tid"] == r["pid"]]
    check(len(main) == 1 and main[0]["large"]["live"] == want and main[0]["alive"], "main thread row holds them")


def case_names(a, tmp):
    rc, out, err = run([a.counts, "names"], clean_env(a.lib, LOWTIDE_STATS="json",
                                                      LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}")
    did = json.loads(out)
    r = load(only_file(tmp))
    check_schema(r)
    by = {row["name"]: row for row in r["threads"]}
    check(len(by) == len(r["threads"]), f"distinct names {[row['name'] for row in r['threads']]}")
    for name, alive in [("early-one", False), ("early-two", False), ("renamed-late", False),
                        ("still-here", True), ("main-renamed", True)]:
        row = by.get(name)
        if check(row is not None, f"a row named {name}: {sorted(by)}"):
            check(row["alive"] is alive, f"{name}: alive {alive}")
            check(row["calls"]["malloc"] >= 51 and row["calls"]["free"] >= 51, f"{name}: its calls")
    check(by.get("main-renamed", {}).get("tid") == did["main_tid"] == r["pid"], "main row tid")
    check(not any(n.startswith("report_counts") for n in by), "no row left under the inherited name")


def case_many(a, tmp):
    rc, out, err = run([a.counts, "many"], clean_env(a.lib, LOWTIDE_STATS="json",
                                                     LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}")
    r = load(only_file(tmp))
    check_schema(r)
    rows = r["threads"]
    named = [row for row in rows if row["folded"] == 0]
    folded = [row for row in rows if row["folded"] != 0]
    check(len(named) == 256, f"256 thread rows, got {len(named)}")
    check(len(folded) == 1 and folded[-1] is rows[-1], "one folded row, last")
    if folded:
        f = folded[0]
        check(f["name"] == f"{f['folded']} other threads" and f["tid"] == 0 and f["alive"] is False,
              f"folded row {f['name']!r}")
        check(len(named) + f["folded"] == 301, f"301 threads in all: {len(named)} + {f['folded']}")
    weights = [row["small"]["out"] + row["large"]["out"] for row in named]
    check(weights == sorted(weights, reverse=True), "rows sorted by bytes handed out")


def case_recycle(a, tmp):
    rc, out, err = run([a.counts, "recycle"], clean_env(a.lib, LOWTIDE_STATS="json",
                                                        LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}")
    r = load(only_file(tmp))
    check_schema(r)
    named = [row for row in r["threads"] if row["folded"] == 0]
    folded = [row for row in r["threads"] if row["folded"] != 0]
    check(len(named) == 256 and len(folded) == 1, f"{len(named)} rows + {len(folded)} folded")
    if folded:
        check(len(named) + folded[0]["folded"] == 321, "321 threads accounted for")
    check(r["totals"]["calls"]["free"] >= 320, "recycled threads' frees still in the totals")


# The registry's rows after 5,000 short-lived threads: the 256 heaviest
# exited ones kept, the main thread, and any still exiting (a handful); the
# slots lowtide maps follow the rows (a freed slot is reused before a new one
# is mapped). Before the registry folded threads as they went, it kept every
# thread that had exited in the last 2 s: about all 5,000 here.
CHURN_MAX_ROWS = 256 + 1 + 128


def case_churn(a, tmp):
    rc, out, err = run([a.counts, "churn"], clean_env(a.lib, LOWTIDE_STATS="json",
                                                      LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}")
    did = json.loads(out)
    r = load(only_file(tmp))
    check_schema(r)
    n, sizes = did["threads"], did["sizes"]
    check(len(set(sizes)) == n, "distinct sizes")
    check(did["registry"] <= CHURN_MAX_ROWS,
          f"registry rows after {n} threads: {did['registry']} (at most {CHURN_MAX_ROWS})")
    # Exact totals: only the workers make large allocations and memalign calls.
    t = r["totals"]
    check(t["large"]["requested"] == sum(sizes), f"large requested {t['large']['requested']} != {sum(sizes)}")
    check(t["calls"]["aligned"] == n, f"aligned calls {t['calls']['aligned']} != {n}")
    named = [row for row in r["threads"] if row["folded"] == 0]
    folded = [row for row in r["threads"] if row["folded"] != 0]
    check(len(folded) == 1 and len(named) == 256, f"{len(named)} rows + {len(folded)} folded")
    if folded:
        # The workers and the main thread, and lowtide-decay's row if it gave
        # cached blocks back while the program ran (its counts are of bytes
        # returned only: the lightest row, so folded).
        seen = len(named) + folded[0]["folded"]
        check(seen in (n + 1, n + 2), f"{n + 1} threads (+ lowtide-decay) accounted for: {seen}")
    # The rows kept are the heaviest threads (by bytes handed out: each one
    # large block's usable size, equal for neighbouring sizes), each with its
    # own exact counts; the main thread is lighter.
    check(all(not row["alive"] and row["tid"] != did["main_tid"] for row in named), "rows are exited workers")
    check(sorted(row["large"]["out"] for row in named) == sorted(did["usable"])[-256:],
          "the rows are the 256 heaviest threads")
    check(len({row["large"]["requested"] for row in named} - set(sizes)) == 0
          and len({row["large"]["requested"] for row in named}) == 256, "each row one thread's block")
    check(all(row["calls"]["aligned"] == 1 and row["calls"]["malloc"] == 1 and row["calls"]["free"] == 2
              for row in named), "each row: one malloc, one memalign, two frees")


def family(a, tmp, pattern):
    target = os.path.join(tmp, pattern)
    no_file = "-" if "%p" in pattern else target
    rc, out, err = run([a.procs, "family", no_file], clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=target))
    check(rc == 0, f"exit status {rc}")
    return json.loads(out)


def case_family_pid(a, tmp):
    pids = family(a, tmp, "r.%p.json")
    names = sorted(os.listdir(tmp))
    want = sorted(f"r.{pids[k]}.json" for k in ("parent", "fork_exit", "fork__exit", "exec_self", "exec_python"))
    check(names == want, f"one file per process (not the vfork child {pids['vfork']}): {names} vs {want}")
    seen = set()
    for k in ("parent", "fork_exit", "fork__exit", "exec_self", "exec_python"):
        path = os.path.join(tmp, f"r.{pids[k]}.json")
        if not check(os.path.exists(path), f"{k}'s report"):
            continue
        r = load(path)
        check_schema(r, pid=pids[k])
        seen.add(r["pid"])
        check(r["large"]["maps"] >= 1, f"{k}: its large block")
        check(any(row["tid"] == pids[k] and row["alive"] for row in r["threads"]), f"{k}: main thread row")
    check(len(seen) == 5, "five distinct pids")
    check(load(os.path.join(tmp, f"r.{pids['exec_self']}.json"))["command"].endswith(" alloc"), "exec'd self")
    check(load(os.path.join(tmp, f"r.{pids['exec_python']}.json"))["command"].startswith("/usr/bin/python3 -c"),
          "exec'd python")


def case_family_nopid(a, tmp):
    pids = family(a, tmp, "r.json")
    check(sorted(os.listdir(tmp)) == ["r.json"], f"only r.json: {os.listdir(tmp)}")
    r = load(os.path.join(tmp, "r.json"))
    check_schema(r, pid=pids["parent"])


def hello(a, tmp, **kv):
    return run([a.procs, "hello"], clean_env(a.lib, **kv))


OWN_OUT = "hello from report_procs\n"
OWN_ERR = "report_procs: own stderr line\n"


def case_bogus(a, tmp):
    rc, out, err = hello(a, tmp, LOWTIDE_STATS="bogus", LOWTIDE_STATS_FILE=os.path.join(tmp, "r.%p.json"))
    check(rc == 0, f"exit status {rc}")
    check(out == OWN_OUT, f"stdout intact: {out!r}")
    lines = err.splitlines(keepends=True)
    warn = [ln for ln in lines if "lowtide" in ln]
    check(len(warn) == 1, f"exactly one warning line: {lines}")
    check(sorted(lines) == sorted(warn + [OWN_ERR]), f"stderr: the warning and the program's line: {lines}")
    if warn:
        w = warn[0]
        check(w.startswith("lowtide: warning: LOWTIDE_STATS='bogus'") and "default off" in w, f"warning: {w!r}")
    check(os.listdir(tmp) == [], f"no report written: {os.listdir(tmp)}")


def case_off(a, tmp):
    for kv in ({}, {"LOWTIDE_STATS": "0"}, {"LOWTIDE_STATS": "off"}):
        for with_file in (False, True):
            env = dict(kv)
            if with_file:
                env["LOWTIDE_STATS_FILE"] = os.path.join(tmp, "r.%p.json")
            rc, out, err = hello(a, tmp, **env)
            check(rc == 0 and out == OWN_OUT, f"{env}: exit status and stdout")
            check(err == OWN_ERR, f"{env}: nothing on stderr but the program's own line: {err[:300]!r}")
            check(os.listdir(tmp) == [], f"{env}: no file created: {os.listdir(tmp)}")


def case_unwritable(a, tmp):
    rc, out, err = hello(a, tmp, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE="/nonexistent-dir/r.%p.json")
    check(rc == 0 and out == OWN_OUT, f"exit status {rc}, stdout")
    lines = err.splitlines(keepends=True)
    warn = [ln for ln in lines if ln.startswith("lowtide: warning:")]
    check(len(warn) == 1 and OWN_ERR in lines, f"one warning, the program's line: {lines[:3]}")
    rest = "".join(ln for ln in lines if ln not in warn and ln != OWN_ERR)
    try:
        r = json.loads(rest)
    except ValueError as e:
        check(False, f"the JSON report on stderr: {e}: {rest[:300]!r}")
        return
    check_schema(r)
    if warn:
        check(re.fullmatch(r"lowtide: warning: cannot write the report to '/nonexistent-dir/r\.(\d+)\.json' "
                           r"\(No such file or directory\); writing it to stderr instead\n", warn[0]) is not None
              and f"r.{r['pid']}.json" in warn[0], f"warning names the expanded path: {warn[0]!r}")
    # text goes the same way
    rc, out, err = hello(a, tmp, LOWTIDE_STATS="text", LOWTIDE_STATS_FILE="/nonexistent-dir/r.txt")
    check(rc == 0 and "cannot write the report to '/nonexistent-dir/r.txt'" in err and "==== lowtide" in err,
          "text report on stderr after the warning")


def case_unwritable_more(a, tmp):
    """Other ways a report path fails: a directory, a path under a regular
    file, a read-only file system. Each: one warning, the report on stderr."""
    os.mkdir(os.path.join(tmp, "adir"))
    with open(os.path.join(tmp, "afile"), "w") as f:
        f.write("x")
    for path in (os.path.join(tmp, "adir"), os.path.join(tmp, "afile", "r.json"), "/proc/self/lowtide-r.json"):
        rc, out, err = hello(a, tmp, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=path)
        lines = err.splitlines(keepends=True)
        warn = [ln for ln in lines if ln.startswith("lowtide: warning: cannot write the report to")]
        check(rc == 0 and out == OWN_OUT, f"{path}: exit status {rc}, stdout")
        check(len(warn) == 1 and f"'{path}'" in warn[0], f"{path}: one warning naming it: {lines[:3]}")
        rest = "".join(ln for ln in lines if ln not in warn and ln != OWN_ERR)
        try:
            check_schema(json.loads(rest))
        except ValueError as e:
            check(False, f"{path}: the JSON report on stderr: {e}: {rest[:200]!r}")
    check(os.path.isdir(os.path.join(tmp, "adir")) and open(os.path.join(tmp, "afile")).read() == "x",
          "the directory and the file are left as they were")


def case_special_targets(a, tmp):
    """A report path naming something that is not a regular file (a symlink to
    /dev/null, as LOWTIDE_STATS_FILE=/dev/stderr would be; a FIFO) is written
    to, never replaced by a file of ours (as root, replacing /dev/null or
    /dev/stderr would break the system)."""
    link = os.path.join(tmp, "null-link")
    os.symlink("/dev/null", link)
    rc, out, err = hello(a, tmp, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=link)
    check(rc == 0 and out == OWN_OUT and err == OWN_ERR, f"report to a link to /dev/null: exit {rc}, stderr {err[:300]!r}")
    check(os.path.islink(link) and os.readlink(link) == "/dev/null", "the symlink to /dev/null is still that symlink")
    check(not [n for n in os.listdir(tmp) if n.startswith("null-link.tmp")], f"no temporary left: {os.listdir(tmp)}")

    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    # Opened for reading first, without blocking, so a writer's open succeeds;
    # a hello report is far smaller than the pipe buffer.
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    rc, out, err = hello(a, tmp, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=fifo)
    chunks = []
    while True:
        try:
            b = os.read(rfd, 65536)
        except BlockingIOError:
            break
        if not b:
            break
        chunks.append(b)
    os.close(rfd)
    check(rc == 0 and out == OWN_OUT and err == OWN_ERR, f"report to a FIFO: exit {rc}, stderr {err[:300]!r}")
    check(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO is still a FIFO")
    body = b"".join(chunks).decode(errors="replace")
    try:
        check_schema(json.loads(body))
    except ValueError as e:
        check(False, f"the JSON report through the FIFO: {e}: {body[:200]!r}")


def case_thread_exit(a, tmp):
    rc, out, err = run([a.procs, "thread-exit"], clean_env(a.lib, LOWTIDE_STATS="json",
                                                           LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}")
    did = json.loads(out)
    r = load(only_file(tmp))
    check_schema(r, pid=did["pid"])  # includes partial == false
    ex = [row for row in r["threads"] if row["name"] == "exiter"]
    check(len(ex) == 1 and ex[0]["tid"] == did["exiter_tid"] and ex[0]["alive"] is True,
          "the exiting thread's row (still alive while it runs exit())")
    check(r["large"]["maps"] >= 2, "both large blocks counted")


def case_quick_exit(a, tmp):
    # quick_exit ends the process through glibc's internal _exit, which
    # lowtide's _exit never sees, and runs no destructor: the report comes
    # from lowtide's at_quick_exit handler, after the program's own.
    rc, out, err = run([a.procs, "quick-exit"], clean_env(a.lib, LOWTIDE_STATS="json",
                                                          LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}")
    check(out == "own quick_exit handler\n", f"the program's handler ran: {out!r}")
    path = only_file(tmp)
    if path is None:
        return
    r = load(path)
    check_schema(r)
    check(r["large"]["maps"] >= 1, "its large block counted")


# --- the text report -------------------------------------------------------

SECTIONS = ["-- process --", "-- totals --", "-- large path --", "-- small path --",
            "-- threads (by bytes handed out) --", "-- request sizes --"]


def section(lines, title):
    """The lines of section `title`, up to the blank line that ends it."""
    i = lines.index(title) + 1
    j = lines.index("", i) if "" in lines[i:] else len(lines)
    return lines[i:j]


def cells(line):
    """(start, end, text) of each cell of a line: cells are parted by two
    spaces or more (a label or a size holds single spaces)."""
    return [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", line)]


def check_label_column(title, lines):
    """A section of "label   value" lines: every label in one column and
    every value right-aligned in another, two spaces at least between them
    (a label longer than its column pushed its value right: "misses topped
    up from a cached block", 36 characters in a column of 34, until
    2026-12-07). A unit suffix after the value ("*s", "   (env)") is not
    part of it."""
    rows = []
    for ln in lines:
        body = re.sub(r"(\*s|   \((env|cgroup_v2|cgroup_v1)\))$", "", ln)
        m = re.fullmatch(r"( *\S(?:.*?\S)?)( {2,})(\S+(?: \S+)?)", body)
        check(m is not None, f"{title}: {ln!r} is a label, two spaces or more, and a value")
        if m is None:
            continue
        rows.append((m.group(1), m.end(1), m.start(3), m.end(3)))
    edges = {r[3] for r in rows}
    check(len(edges) == 1, f"{title}: every value ends in one column: "
                           f"{sorted((r[3], r[0]) for r in rows if r[3] != rows[0][3])} vs {rows[0][3]} ({rows[0][0]!r})")
    widest = max(rows, key=lambda r: r[1])
    first = min(rows, key=lambda r: r[2])
    check(widest[1] + 2 <= first[2], f"{title}: the labels' column (to {widest[1]}, {widest[0]!r}) ends two spaces "
                                     f"before the values' (from {first[2]}, {first[0]!r})")


def check_columns(lines):
    """The text report's columns: the header's values at column 12, each
    "label value" section's labels and values in columns of their own, and
    the tables' cells right-aligned under their headings."""
    head = lines[1:lines.index("")]
    for ln in head:
        check(len(ln) > 12 and ln[11] == " " and ln[12] != " " and "  " not in ln[:12].rstrip(),
              f"header line {ln!r}: a label of at most 11 characters, its value from column 12")
    check_label_column("process", section(lines, "-- process --"))
    check_label_column("large path", section(lines, "-- large path --"))
    check_label_column("small path", section(lines, "-- small path --"))
    totals = section(lines, "-- totals --")
    check(len(totals) == 5, f"totals: five lines: {totals}")
    for head_i, rows, named in ((0, totals[1:2], 0), (2, totals[3:5], 1)):
        want = [e for _, e, _ in cells(totals[head_i])[1:]]
        for ln in rows:
            got = [e for _, e, _ in cells(ln)[named:]]
            check(got == want, f"totals: {ln!r} right-aligned under {totals[head_i]!r}: {got} vs {want}")
    threads = section(lines, SECTIONS[4])
    want = cells(threads[0])
    for ln in threads[1:]:
        got = cells(ln)
        check(got[0][1] == want[0][1], f"threads: tid {ln!r} ends under {threads[0]!r}")
        check([e for _, e, _ in got[-4:]] == [e for _, e, _ in want[-4:]],
              f"threads: the numbers of {ln!r} right-aligned under {threads[0]!r}")
    ends = set()
    for ln in section(lines, SECTIONS[5]):
        m = re.fullmatch(r"( *\S+ \S+) \.\. <(\S+ \S+) *?( +\d+)  #+", ln)
        check(m is not None and m.end(1) == 10 and m.start(2) == 15 and m.end(2) <= 25, f"request sizes: {ln!r}")
        if m is not None:
            ends.add(m.end(3))
    check(len(ends) == 1, f"request sizes: every count ends in one column: {sorted(ends)}")


def parse_text(text):
    """The numbers the text report prints as plain integers."""
    lines = text.splitlines()
    check(re.fullmatch(r"==== lowtide \d+\.\d+\.\d+ report: pid \d+ ====", lines[0]) is not None,
          f"header {lines[0]!r}")
    idx = [lines.index(s) if s in lines else -1 for s in SECTIONS]
    check(all(i > 0 for i in idx) and idx == sorted(idx), f"sections in order: {idx}")
    v = {"pid": int(lines[0].split()[5])}
    limit = [ln for ln in lines if ln.startswith("memory limit ")]
    check(len(limit) == 1 and re.fullmatch(r"memory limit\s+(none|\S+ \S+\s+\((env|cgroup_v2|cgroup_v1)\))",
                                           limit[0]) is not None, f"the memory limit row {limit}")
    cap = [ln for ln in lines if ln.startswith("reuse cache cap ")]
    check(len(cap) == 1 and re.fullmatch(r"reuse cache cap\s+(0 B|\d+(\.\d)? (B|KiB|MiB|GiB|TiB))", cap[0]) is not None,
          f"the reuse cache cap row {cap}")
    rows = stats_table()
    i = lines.index("-- totals --")
    calls = in_object(rows, "totals_calls")
    check(lines[i + 1].split() == ["calls"] + [r["label"] for r in calls], f"calls header {lines[i + 1]!r}")
    v["calls"] = dict(zip([r["key"] for r in calls], map(int, lines[i + 2].split())))
    heads = [r["label"] for r in in_object(rows, "totals_small")] + ["live"]
    check(re.split(r"\s{2,}", lines[i + 3].strip()) == ["path"] + heads, f"path header {lines[i + 3]!r}")
    # The large- and small-path sections: one row per labelled field of the
    # `large` or `small` object, in its order; v["large"] and v["small"] map
    # JSON keys to the text's values.
    for obj, title in (("large", SECTIONS[2]), ("small", SECTIONS[3])):
        a = lines.index(title) + 1
        v[obj] = {}
        for r in (r for r in in_object(rows, obj) if r["label"]):
            m = re.fullmatch(re.escape(r["label"]) + r"\s+(\d+|\d+(?:\.\d)? [KMGT]?i?B)(\*s)?", lines[a])
            check(m is not None, f"{obj}-path row for {r['name']} ({r['label']!r}): {lines[a]!r}")
            v[obj][r["key"]] = (r["unit"], m.group(1))
            if r["unit"] == "COUNT":
                v[r["label"]] = int(m.group(1))
            a += 1
        check(lines[a] == "", f"nothing after the {obj} path's labelled rows: {lines[a]!r}")
    t = lines.index(SECTIONS[4])
    h = lines.index(SECTIONS[5])
    v["thread_rows"] = h - t - 3  # header line, rows, blank line
    v["hist_rows"] = len([ln for ln in lines[h + 1:] if ln.strip()])
    check_columns(lines)
    return v


def case_python_text(a, tmp):
    rc, out, err = run([sys.executable, a.workload], clean_env(a.lib, LOWTIDE_STATS="text"))
    check(rc == 0, f"exit status {rc}")
    did = json.loads(out)
    check(err.startswith("==== lowtide ") and err.endswith("#\n"), f"stderr is the text report: {err[:200]!r}")
    v = parse_text(err)
    check(v["blocks allocated"] >= did["large_buffers"], f"allocated {v['blocks allocated']} >= {did['large_buffers']}")
    check(v["thread_rows"] >= did["threads"] + 1, "a row per thread")


def case_python_both(a, tmp):
    path = os.path.join(tmp, "r.%p.txt")
    rc, out, err = run([sys.executable, a.workload], clean_env(a.lib, LOWTIDE_STATS="both", LOWTIDE_STATS_FILE=path))
    check(rc == 0, f"exit status {rc}")
    check(err == "", f"nothing on stderr: {err[:200]!r}")
    did = json.loads(out)
    with open(only_file(tmp)) as f:
        body = f.read()
    at = body.find('{"schema"')
    check(at > 0, "text, then JSON")
    text, r = body[:at], json.loads(body[at:])
    check_schema(r)
    v = parse_text(text)
    check(v["pid"] == r["pid"], "same pid")
    check(v["calls"] == r["totals"]["calls"], f"calls: text {v['calls']} == json {r['totals']['calls']}")
    for obj in ("large", "small"):
        check(set(v[obj]) == {k for k in r[obj] if any(x["key"] == k and x["label"]
                                                       for x in in_object(stats_table(), obj))},
              f"a text row for every labelled key of the JSON {obj} object")
        for key, (unit, text_value) in v[obj].items():
            if unit == "COUNT":
                check(int(text_value) == r[obj][key], f"{obj}.{key}: text {text_value} == json {r[obj][key]}")
            else:
                check(bytes_close(text_value, r[obj][key]), f"{obj}.{key}: text {text_value} shows json {r[obj][key]}")
    check(v["thread_rows"] == len(r["threads"]), f"thread rows: text {v['thread_rows']} json {len(r['threads'])}")
    check(v["hist_rows"] == len(r["histogram"]), "histogram rows")
    n = did["large_buffers"]
    check(r["large"]["maps"] >= n and r["large"]["unmaps"] >= n, f"mapped/released >= {n} buffers")
    check(r["totals"]["large"]["requested"] >= n * did["large_size"], "large requested >= what was built")
    check(hist(r, did["large_size"]) >= n, "histogram [2 MiB, 4 MiB) >= buffers built")
    check(sum(1 for row in r["threads"] if row["large"]["requested"] >= 25 * did["large_size"]) >= did["threads"],
          "each worker thread's row has its 25 buffers")


HUGE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
for shift in (46, 47, 50, 62):
    libc.free(libc.malloc(1 << shift))  # NULL where refused: counted all the same
"""


def case_huge_requests(a, tmp):
    # Requests lowtide cannot serve (64 TiB to 4 EiB, below PTRDIFF_MAX:
    # counted as calls) each in the class its size is in. With 48 classes
    # the last one, [2^46, 2^47), took all four.
    path = os.path.join(tmp, "r.json")
    rc, out, err = run([sys.executable, "-c", HUGE], clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=path))
    check(rc == 0, f"exit status {rc}: {err[-300:]!r}")
    r = load(path)
    check_schema(r)
    for shift in (46, 47, 50, 62):
        check(hist(r, 1 << shift) == 1, f"histogram [2^{shift}, 2^{shift + 1}) holds its one request: "
                                        f"{[h for h in r['histogram'] if h['min'] >= 1 << 40]}")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--lib", required=True)
    ap.add_argument("--counts")
    ap.add_argument("--procs")
    ap.add_argument("--workload")
    a = ap.parse_args()
    lttest.run_case(CASES[a.case], a, "lowtide-stats-")
    return 0


if __name__ == "__main__":
    sys.exit(main())
