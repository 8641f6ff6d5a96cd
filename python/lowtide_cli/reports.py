"""Reading lowtide's JSON reports (docs/report.md, schema_version 1) and
merging several, one per process, into one summary."""
import json
import math

SCHEMA = "lowtide-report"
SCHEMA_VERSION = 1
CALLS = ("malloc", "calloc", "realloc", "aligned", "free")
PATH_KEYS = ("requested", "out", "freed", "live")
# The keys of a report's "large" object that are process-wide levels,
# handled apart (live is summed, peak_live has a max and a sum); every other
# key there adds up across processes. The keys themselves are not listed
# here: they are the report's (lowtide writes that object from its table of
# counters, include/lowtide/lowtide_stats.def).
LARGE_LEVELS = ("live", "peak_live")


def large_sums(r):
    """The keys of r["large"] that add up across processes, in order."""
    return [k for k in r["large"] if k not in LARGE_LEVELS]


class BadReport(ValueError):
    pass


# The types of the fields the summary, the merge and the flame graph read:
# (test, what the message says the field is not). A hand-made report of the
# right schema with "pid": "x" ended in a TypeError traceback in the merge.
def _int(v):
    # Every count of the report is a 64-bit integer (docs/report.md): a
    # larger one would not even convert to float for human().
    return isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 64)


INT = (_int, "a whole number")
NUMBER = (lambda v: _int(v) or (isinstance(v, float) and math.isfinite(v)), "a number")
STR = (lambda v: isinstance(v, str), "a string")
BOOL = (lambda v: isinstance(v, bool), "true or false")
ARRAY = (lambda v: isinstance(v, list), "an array")
OBJECT = (lambda v: isinstance(v, dict), "an object")
# process_row's fields; every value of the "large" object is an INT too.
ROW_FIELDS = ([("pid", INT), ("command", STR), ("version", STR), ("uptime_s", NUMBER), ("partial", BOOL),
               ("threads", ARRAY), ("process.peak_rss", INT), ("process.rss", INT), ("large", OBJECT),
               ("large.live", INT), ("large.peak_live", INT)]
              + [("totals.calls." + c, INT) for c in CALLS]
              + [("totals.%s.%s" % (p, k), INT) for p in ("small", "large") for k in PATH_KEYS])


def _shown(v):
    t = repr(v)
    return t if len(t) <= 40 else t[:37] + "..."


def field(obj, name, want, path, where=""):
    """obj[name] (name dotted: "totals.calls.malloc"), checked against want;
    BadReport naming path and the field otherwise. where: obj's own name in
    the report ("sites.top[3]")."""
    v = obj
    for k in name.split("."):
        if not isinstance(v, dict) or k not in v:
            raise BadReport("%s: field %s%s is missing" % (path, where, name))
        v = v[k]
    if not want[0](v):
        raise BadReport("%s: field %s%s is %s, not %s" % (path, where, name, _shown(v), want[1]))
    return v


def check_fields(r, path):
    """BadReport unless r has every field process_row reads, of its type."""
    for name, want in ROW_FIELDS:
        field(r, name, want, path)
    for k in r["large"]:
        field(r["large"], k, INT, path, "large.")
    # The "small" object came later (reports of lowtide before it have none):
    # every value a count that adds up across processes.
    if "small" in r:
        field(r, "small", OBJECT, path)
        for k in r["small"]:
            field(r["small"], k, INT, path, "small.")


def check_sites(r, path):
    """BadReport unless r's call sites, if it has any, have every field the
    merge, the summary's site lines and the flame graph read, of its type."""
    if "sites" not in r:
        return
    sites = field(r, "sites", OBJECT, path)
    if not sites.get("enabled"):
        return
    if "not_shown" in sites:
        for k in ("bytes", "at_peak_bytes"):
            if k in field(sites, "not_shown", OBJECT, path, "sites."):
                field(sites, "not_shown." + k, INT, path, "sites.")
    for i, site in enumerate(field(sites, "top", ARRAY, path, "sites.")):
        where = "sites.top[%d]" % i
        if not isinstance(site, dict):
            raise BadReport("%s: field %s is %s, not an object" % (path, where, _shown(site)))
        for k in SITE_SUMS + ("peak_live_bytes",) + (("at_peak_bytes",) if "at_peak_bytes" in site else ()):
            field(site, k, INT, path, where + ".")
        for j, f in enumerate(field(site, "frames", ARRAY, path, where + ".")):
            w = "%s.frames[%d]." % (where, j)
            field(f, "module", STR, path, w)
            field(f, "offset", INT, path, w)
            if f.get("function") is not None:
                field(f, "function", STR, path, w)
        for j, py in enumerate(field(site, "python", ARRAY, path, where + ".") if "python" in site else ()):
            w = "%s.python[%d]." % (where, j)
            for k, want in (("file", STR), ("line", INT), ("function", STR)):
                field(py, k, want, path, w)


def load(path):
    """The JSON report in path. A LOWTIDE_STATS=both file (text, then the
    JSON object) is read from its JSON line on."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    # The JSON object starts on the last line that opens one: the text part
    # before it shows the command line raw, whose own lines may start with
    # {"schema" too (the JSON escapes every newline in its strings).
    start = 0 if text.lstrip().startswith("{") else text.rfind('\n{"schema"')
    if start < 0:
        raise BadReport("%s: no JSON report in it (was it written with LOWTIDE_STATS=json?)" % path)
    try:
        r = json.loads(text[start:])
    except ValueError as e:
        # JSONDecodeError, or an integer of more than 4300 digits.
        raise BadReport("%s: not valid JSON (%s)" % (path, e)) from None
    except RecursionError:
        # Nested deeper than Python's recursion limit: no report of ours is.
        raise BadReport("%s: not valid JSON (nested too deeply to be a lowtide report)" % path) from None
    if not isinstance(r, dict) or r.get("schema") != SCHEMA:
        raise BadReport("%s: not a lowtide report" % path)
    if r.get("schema_version") != SCHEMA_VERSION:
        raise BadReport("%s: schema_version %r; this lowtide reads version %d"
                        % (path, r.get("schema_version"), SCHEMA_VERSION))
    return r


def process_row(r, path):
    """The per-process numbers the summary shows, flat (BadReport naming
    a field that is missing or not of its type)."""
    check_fields(r, path)
    t, lg, p = r["totals"], r["large"], r["process"]
    row = {"file": path, "pid": r["pid"], "command": r["command"], "version": r["version"],
           "uptime_s": r["uptime_s"], "partial": r["partial"], "threads": len(r["threads"]),
           "peak_rss": p["peak_rss"], "rss": p["rss"], "large_peak_live": lg["peak_live"],
           "large_live": lg["live"]}
    for c in CALLS:
        row["calls_" + c] = t["calls"][c]
    for path_name in ("small", "large"):
        for k in PATH_KEYS:
            row["%s_%s" % (path_name, k)] = t[path_name][k]
    for k in large_sums(r):
        row["large_" + k] = lg[k]
    for k in r.get("small", {}):
        row["small_" + k] = r["small"][k]
    return row


# Keys of a row that add up to a meaningful total, besides the large.*
# counters (see sum_keys).
SUM_KEYS = (["calls_" + c for c in CALLS]
            + ["%s_%s" % (p, k) for p in ("small", "large") for k in PATH_KEYS]
            + ["threads", "rss", "large_live"])
# Per-process peaks: their max is a lower bound of the processes' combined
# peak, their sum an upper bound (the processes need not peak together).
PEAK_KEYS = ("peak_rss", "large_peak_live")


def sum_keys(rows):
    """SUM_KEYS with the rows' large.* and small.* counters (large_maps,
    small_trims, ...: the keys process_row took from large_sums and the
    small object) after the paths' keys, in report order."""
    extra = []
    for r in rows:
        extra += [k for k in r if k.startswith(("large_", "small_")) and k not in SUM_KEYS and k not in PEAK_KEYS
                  and k not in extra]
    return SUM_KEYS[:-3] + extra + SUM_KEYS[-3:]


def merge(rows):
    total = {"processes": len(rows), "partial": any(r["partial"] for r in rows)}
    for k in sum_keys(rows):
        total[k] = sum(r.get(k, 0) for r in rows)
    for k in PEAK_KEYS:
        total[k + "_max"] = max((r[k] for r in rows), default=0)
        total[k + "_sum"] = sum(r[k] for r in rows)
    return total


# A site's counters that add up across processes (docs/report.md, sites.top).
SITE_SUMS = ("captured", "blocks", "bytes", "live_blocks", "live_bytes", "remaps")


def site_key(site):
    """A stack as the same code in another process of the same program has
    it: module and module-relative offset of each frame, and the Python
    frames (file, line, function) when the report has them: one C stack
    through the interpreter serves many Python lines, each its own site."""
    return (tuple((f["module"], f["offset"]) for f in site["frames"]),
            tuple((p["file"], p["line"], p["function"]) for p in site.get("python", ())))


def merge_sites(reports):
    """The top sites of every report made with call sites on, merged by
    stack, sorted by the sum of their peaks. Each process lists only its top
    LOWTIDE_SITES sites, so a merged site covers the processes that listed
    it (`processes`). Peaks: max and sum, as for the processes' peaks."""
    merged = {}
    for r in reports:
        sites = r.get("sites") or {}
        if not sites.get("enabled"):
            continue
        for site in sites["top"]:
            m = merged.get(site_key(site))
            if m is None:
                m = merged[site_key(site)] = dict({k: 0 for k in SITE_SUMS}, frames=site["frames"], processes=0,
                                                  python=site.get("python", []),
                                                  peak_live_bytes_max=0, peak_live_bytes_sum=0)
            m["processes"] += 1
            for k in SITE_SUMS:
                m[k] += site[k]
            m["peak_live_bytes_max"] = max(m["peak_live_bytes_max"], site["peak_live_bytes"])
            m["peak_live_bytes_sum"] += site["peak_live_bytes"]
    return sorted(merged.values(), key=lambda m: (-m["peak_live_bytes_sum"], -m["bytes"]))


def usable(path):
    """The report in path, its fields checked (check_fields, check_sites),
    or BadReport/OSError."""
    r = load(path)
    check_fields(r, path)
    check_sites(r, path)
    return r


def load_and_merge(paths):
    """(rows, total, problems): problems lists files that could not be used
    (and reports whose call sites are malformed: their row is kept).
    total["sites"] is merge_sites() of the usable reports."""
    rows, loaded, problems = [], [], []
    for path in paths:
        try:
            r = load(path)
            rows.append(process_row(r, path))
        except (OSError, BadReport, KeyError, TypeError) as e:
            problems.append(str(e) if not isinstance(e, (KeyError, TypeError))
                            else "%s: missing or malformed field %s" % (path, e))
            continue
        try:
            check_sites(r, path)
            loaded.append(r)
        except BadReport as e:
            problems.append("%s; its call sites are left out" % e)
    rows.sort(key=lambda r: (r["pid"], r["file"]))
    total = merge(rows)
    try:
        total["sites"] = merge_sites(loaded)
    except (KeyError, TypeError) as e:
        problems.append("a sites object is malformed (field %s); sites not merged" % e)
        total["sites"] = []
    return rows, total, problems
