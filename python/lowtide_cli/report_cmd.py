"""`lowtide report`: several JSON reports, one summary."""
import json
import os
import sys

from . import flame, reports
from .units import human, printable


def summary_lines(rows, total):
    """The merged summary as text lines (also used by `lowtide compare`),
    each printable(): command lines and symbols are the processes' own."""
    out = []
    hdr = "%8s  %-28s %10s %10s %9s %9s %11s %11s %11s %7s"
    out.append(hdr % ("pid", "command", "peak RSS", "RSS end", "allocs", "frees", "large out",
                      "large peak", "given back", "threads"))
    for r in rows:
        cmd = r["command"].replace("\n", " ")
        if len(cmd) > 28:
            cmd = cmd[:27] + "…"
        allocs = sum(r["calls_" + c] for c in ("malloc", "calloc", "realloc", "aligned"))
        out.append(hdr % (r["pid"], cmd, human(r["peak_rss"]), human(r["rss"]), allocs, r["calls_free"],
                          human(r["large_out"]), human(r["large_peak_live"]), human(r["large_returned_bytes"]),
                          r["threads"]) + (" PARTIAL" if r["partial"] else ""))
    t = total
    allocs = sum(t["calls_" + c] for c in ("malloc", "calloc", "realloc", "aligned"))
    out.append("")
    out.append("total over %d process%s (sums, except where a peak says max):"
               % (t["processes"], "" if t["processes"] == 1 else "es"))
    out.append("  calls           malloc %d, calloc %d, realloc %d, aligned %d, free %d  (%d allocating)"
               % (t["calls_malloc"], t["calls_calloc"], t["calls_realloc"], t["calls_aligned"],
                  t["calls_free"], allocs))
    for p in ("small", "large"):
        out.append("  %-15s requested %s, handed out %s, freed %s, live at report %s"
                   % (p + " path", human(t[p + "_requested"]), human(t[p + "_out"]), human(t[p + "_freed"]),
                      human(t[p + "_live"])))
    out.append("  large blocks    %d allocated (%d from the reuse cache), %d released, %d resized in place, "
               "%d moved by mremap, %d copied"
               % (t["large_maps"], t["large_reused"], t["large_unmaps"], t["large_in_place"],
                  t["large_remaps"], t["large_copies"]))
    out.append("  given back      %s to the OS by the large path; %s was still in its reuse cache at report"
               % (human(t["large_returned_bytes"]), human(t["large_cached_bytes"])))
    if "small_trims" in t:  # (reports of lowtide before the small object have none)
        out.append("  small trims     %d by live threads, %s of freed small-block pages given back"
                   % (t["small_trims"], human(t["small_trim_dropped"])))
    out.append("  peak RSS        max %s (largest single process), sum %s (upper bound: the processes "
               "need not peak together)" % (human(t["peak_rss_max"]), human(t["peak_rss_sum"])))
    out.append("  large peak live max %s, sum %s (same reading)"
               % (human(t["large_peak_live_max"]), human(t["large_peak_live_sum"])))
    out.append("  RSS at report   sum %s (each process's RSS when it wrote its report)" % human(t["rss"]))
    if t["partial"]:
        out.append("  PARTIAL         at least one report was read without the registry lock")
    out += site_lines(t.get("sites", []))
    return [printable(line) for line in out]


def frame_text(f):
    where = os.path.basename(f["module"]) + "+" + hex(f["offset"])
    return "%s (%s)" % (f["function"], where) if f.get("function") else where


def site_lines(sites, shown=10, frames=4):
    """The merged call sites (reports written with LOWTIDE_SITES), if any."""
    if not sites:
        return []
    out = ["", "top %d large-allocation sites over all processes (merged by stack; each process lists only its "
           "top LOWTIDE_SITES):" % min(shown, len(sites))]
    for i, m in enumerate(sites[:shown], 1):
        out.append("  #%d  peak live %s summed (max %s in one process), %d blocks / %s allocated, %s live at "
                   "report, in %d process%s"
                   % (i, human(m["peak_live_bytes_sum"]), human(m["peak_live_bytes_max"]), m["blocks"],
                      human(m["bytes"]), human(m["live_bytes"]), m["processes"],
                      "" if m["processes"] == 1 else "es"))
        for p in m.get("python", []):
            out.append("        py  %s at %s:%d" % (p["function"], p["file"], p["line"]))
        for f in m["frames"][:frames]:
            out.append("        " + frame_text(f))
        if len(m["frames"]) > frames:
            out.append("        ... %d more frames" % (len(m["frames"]) - frames))
    return out


def write_flame(paths, flame_svg=None, collapsed_txt=None, of="peak"):
    """--flame/--collapsed: the call sites of the usable reports among
    paths as a flame graph (flame.py). Returns the problems, as strings."""
    loaded = []
    for path in paths:
        try:
            loaded.append(reports.usable(path))
        except (OSError, reports.BadReport):
            pass  # load_and_merge names it
    with_sites = [r for r in loaded if (r.get("sites") or {}).get("enabled")]
    if not with_sites:
        return ["no report has call sites (write them with LOWTIDE_SITES=N): no flame graph"]
    try:
        st = flame.stacks(with_sites, of)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return ["a sites object is malformed (%s): no flame graph" % e]
    problems = []
    for path, text in ((collapsed_txt, lambda: flame.collapsed(st)),
                       (flame_svg, lambda: flame.svg(st, flame.title_of(with_sites, of)))):
        if path is None:
            continue
        try:
            flame.write(path, text())
        except OSError as e:
            problems.append("cannot write %s: %s" % (path, e.strerror or e))
    return problems


def main(paths, as_json=False, flame_svg=None, collapsed_txt=None, flame_of="peak"):
    rows, total, problems = reports.load_and_merge(paths)
    if flame_svg is not None or collapsed_txt is not None:
        problems = problems + write_flame(paths, flame_svg, collapsed_txt, flame_of)
    for p in problems:
        print("lowtide report: " + p, file=sys.stderr)
    if not rows:
        print("lowtide report: no usable report among %d file(s)" % len(paths), file=sys.stderr)
        return 1
    pids = [r["pid"] for r in rows]
    for pid in sorted(set(p for p in pids if pids.count(p) > 1)):
        print("lowtide report: warning: pid %d appears in %d files; each is counted"
              % (pid, pids.count(pid)), file=sys.stderr)
    if as_json:
        print(json.dumps({"processes": rows, "total": total}, indent=1))
    else:
        print("\n".join(summary_lines(rows, total)))
    return 1 if problems else 0
