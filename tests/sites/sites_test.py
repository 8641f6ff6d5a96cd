#!/usr/bin/python3
"""Call sites (LOWTIDE_SITES): runs a program under lowtide with sites on and
checks the report's site table, live-at-exit list, heap at the process's
peak and the flame graph made from it. One case per meson test:

  sites_test.py CASE --lib LIB --prog SITES_PROG [--dlopen EXE --target LIB]
                [--estimate SITES_ESTIMATE] [--launcher scripts/lowtide]

Every child run is bounded by a timeout; the programs arm their own
watchdogs too."""
import argparse
import json
import math
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env  # noqa: E402


TIMEOUT = 150
HELPERS = {"sitetest::one_block", "sitetest::fill_and_drop"}


def run(argv, env):
    return lttest.run(argv, env, TIMEOUT, show_failure=True)


def report_of(tmp):
    names = [n for n in os.listdir(tmp) if n.endswith(".json")]
    check(len(names) == 1, f"one JSON report, got {names}")
    with open(os.path.join(tmp, names[0])) as f:
        return json.load(f)


def short(fn):
    """'sitetest::alloc_and_leak(sitetest::Did*)' -> 'sitetest::alloc_and_leak'"""
    return fn.split("(")[0] if fn else fn


def owner(site, names):
    """The first frame that is one of the named functions."""
    for fr in site["frames"]:
        if short(fr["function"]) in names:
            return short(fr["function"])
    return None


def check_frames(site, prog):
    for fr in site["frames"]:
        check(isinstance(fr["module"], str) and isinstance(fr["offset"], int), f"frame fields {fr}")
    mods = [fr["module"] for fr in site["frames"]]
    check(any(os.path.realpath(m) == os.path.realpath(prog) for m in mods if m != "?"),
          f"site {site['id']}: a frame in {prog}, got {mods}")
    check(not any("liblowtide" in m for m in mods), f"site {site['id']}: lowtide's own frames left out: {mods}")
    check(any(short(fr["function"]) == "main" for fr in site["frames"]), f"site {site['id']}: main is on the stack")


def named(a, tmp, shown):
    rc, out, err = run([a.prog, "named"], clean_env(a.lib, LOWTIDE_STATS="both", LOWTIDE_SITES=str(shown),
                                                   LOWTIDE_SITE_SAMPLE="0",
                                                   LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}")
    check("warning" not in err, f"no warning: {err!r}")
    did = json.loads(out)["functions"]
    with open(os.path.join(tmp, "r.json")) as f:
        body = f.read()
    text, _, js = body.partition('{"schema"')
    r = json.loads('{"schema"' + js)
    s = r["sites"]
    check(s["enabled"] is True and s["shown"] == shown and s["sample_interval"] == 0, f"sites header {s}")
    check(s["table_full"] is False, "table not full")
    names = {d["name"] for d in did}
    top = s["top"]
    check(len(top) == min(shown, s["count"]), f"{len(top)} rows shown, count {s['count']}, asked {shown}")
    peaks = [row["peak_live_bytes"] for row in top]
    check(peaks == sorted(peaks, reverse=True), f"rows sorted by peak live bytes: {peaks}")
    by_owner = {}
    for row in top:
        check_frames(row, a.prog)
        by_owner.setdefault(owner(row, names), []).append(row)
    want = sorted(did, key=lambda d: -d["peak"])[:shown]
    for d in want:
        rows = by_owner.get(d["name"], [])
        if not check(len(rows) == 1, f"{d['name']}: one row, got {len(rows)}"):
            continue
        row = rows[0]
        nm = d["name"]
        check(row["captured"] == d["captures"], f"{nm}: captured {row['captured']} == {d['captures']}")
        check(row["blocks"] == d["blocks"], f"{nm}: blocks {row['blocks']} == {d['blocks']}")
        check(row["bytes"] == d["bytes"], f"{nm}: bytes {row['bytes']} == {d['bytes']}")
        check(row["peak_live_bytes"] == d["peak"], f"{nm}: peak {row['peak_live_bytes']} == {d['peak']}")
        check(row["live_blocks"] == len(d["leaked"]), f"{nm}: live blocks {row['live_blocks']} == {len(d['leaked'])}")
        check(row["live_bytes"] == sum(d["leaked"]), f"{nm}: live bytes {row['live_bytes']} == {sum(d['leaked'])}")
        if nm == "sitetest::grow_buffer":
            moved = r["large"]["remaps"] + r["large"]["copies"]
            check(row["remaps"] == moved, f"{nm}: remaps {row['remaps']} == the process's moves {moved}")
        else:
            check(row["remaps"] == 0, f"{nm}: no remaps")
        check(f"site {row['id']}: peak live" in text, f"{nm}: site {row['id']} in the text report")
        check(nm + "(" in text, f"{nm}: demangled name in the text report")
    # live at exit, grouped by site: the leaked blocks and nothing else
    live = {g["site"]: g for g in s["live"]}
    for d in did:
        sites_of = [row["id"] for row in by_owner.get(d["name"], [])]
        groups = [live[i] for i in sites_of if i in live]
        if d not in want:
            continue
        if not d["leaked"]:
            check(not groups, f"{d['name']}: nothing live at exit")
            continue
        if not check(len(groups) == 1, f"{d['name']}: one live group, got {groups}"):
            continue
        grp = groups[0]
        check(grp["blocks"] == len(d["leaked"]) and grp["bytes"] == sum(d["leaked"]),
              f"{d['name']}: live group {grp} vs leaked {d['leaked']}")
        check(grp["sizes"] == sorted(d["leaked"], reverse=True), f"{d['name']}: sizes {grp['sizes']}")
    check(sum(g["bytes"] for g in s["live"]) == r["large"]["live"], "live groups add up to large.live")
    check(sum(g["blocks"] for g in s["live"]) == r["large"]["maps"] - r["large"]["unmaps"],
          "live groups count the blocks not released")
    check("-- large blocks live at exit, by site --" in text, "live-at-exit section in the text report")
    check_at_peak_sum(r)


def check_at_peak_sum(r):
    """With every block captured (LOWTIDE_SITE_SAMPLE=0) and one thread, the
    heap at the peak is exact: the sites' bytes then add up to the large live
    bytes of that moment, which is the process's peak."""
    s = r["sites"]
    hp = s["heap_at_peak"]
    check(hp["process_peak_live"] == r["large"]["peak_live"], f"heap_at_peak {hp} vs large {r['large']}")
    check(hp["live_then"] == hp["process_peak_live"], f"the copy is of the peak itself: {hp}")
    total = sum(row["at_peak_bytes"] for row in s["top"]) + s["not_shown"]["at_peak_bytes"]
    check(total == hp["live_then"], f"sites at the peak add up to {total}, the large live bytes then {hp['live_then']}")
    check(s["not_shown"]["sites"] == s["count"] - len(s["top"]), f"not_shown counts the rest: {s['not_shown']}")


def case_named(a, tmp):
    named(a, tmp, 20)


def case_limit(a, tmp):
    named(a, tmp, 2)


def case_sampled(a, tmp):
    interval = 1 << 20
    rc, out, err = run([a.prog, "many"], clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_SITES="5",
                                                  LOWTIDE_SITE_SAMPLE=str(interval),
                                                  LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}")
    d = json.loads(out)["functions"][0]
    s = report_of(tmp)["sites"]
    check(s["sample_interval"] == interval, "sample_interval")
    rows = [row for row in s["top"] if owner(row, {d["name"]}) == d["name"]]
    if not check(len(rows) == 1, f"one row for {d['name']}, got {len(rows)}"):
        return
    row = rows[0]
    # 2400 blocks of 300 KiB, each captured with p = 1 - exp(-300K/1M) ~ 0.25:
    # ~600 captures; the scaled figures are within a few % of the truth
    # (20 % is about 6 standard deviations).
    check(0 < row["captured"] < d["blocks"], f"sampled: {row['captured']} of {d['blocks']} captured")
    for k, want in (("blocks", d["blocks"]), ("bytes", d["bytes"])):
        check(abs(row[k] - want) <= 0.2 * want, f"scaled {k} {row[k]} within 20 % of {want}")


def case_dlopen(a, tmp):
    ondemand = os.path.join(tmp, "now.txt")
    rc, out, err = run([a.dlopen, a.target, ondemand], clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_SITES="50",
                                                      LOWTIDE_SITE_SAMPLE="0",
                                                      LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}")
    did = json.loads(out)
    with open(ondemand) as f:
        body = f.read()
    check("-- large blocks live now, by site --" in body, "on-demand reports list the blocks live now")
    os.unlink(ondemand)
    r = report_of(tmp)
    s = r["sites"]
    check(s["enabled"] is True, "sites on")
    target = os.path.basename(a.target)
    from_target = [row for row in s["top"] if row["frames"] and os.path.basename(row["frames"][0]["module"]) == target]
    check(len(from_target) >= 1, "a site whose innermost frame is in the unloaded library")
    for row in from_target:
        # gone at report time: module and offset from the capture, no name
        check(row["frames"][0]["function"] is None, f"no name for an unloaded module's frame: {row['frames'][0]}")
    live_target = [g for g in s["live"] if any(row["id"] == g["site"] for row in from_target)]
    check(sum(g["blocks"] for g in live_target) == did["survivors"],
          f"the {did['survivors']} blocks kept past dlclose are live at exit under the library's site")


def case_bad(a, tmp):
    for var, val, default in (("LOWTIDE_SITES", "many", "0"), ("LOWTIDE_SITES", "1K", "0"),
                              ("LOWTIDE_SITES", "5000", "0"), ("LOWTIDE_SITE_SAMPLE", "2G", "2MiB"),
                              ("LOWTIDE_SITE_SAMPLE", "x", "2MiB")):
        extra = {"LOWTIDE_SITES": "3"} if var != "LOWTIDE_SITES" else {}
        rc, out, err = run([a.prog, "named"], clean_env(a.lib, **{var: val}, **extra))
        check(rc == 0, f"{var}={val}: exit status {rc}")
        lines = [ln for ln in err.splitlines() if ln.startswith("lowtide:")]
        check(len(lines) == 1 and f"{var}='{val}'" in lines[0] and f"using the default {default}" in lines[0],
              f"{var}={val}: one warning naming it and the default, got {lines}")


def case_off(a, tmp):
    rc, out, err = run([a.prog, "named"], clean_env(a.lib, LOWTIDE_STATS="json",
                                                   LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}")
    s = report_of(tmp)["sites"]
    check(s["enabled"] is False and s["top"] == [] and s["count"] == 0, f"sites off by default: {s}")
    did = json.loads(out)["functions"]
    # live blocks are still listed, all without a site
    check([g["site"] for g in s["live"]] == [0], f"one group without a site: {s['live']}")
    check(s["live"][0]["blocks"] == sum(len(d["leaked"]) for d in did), "every leaked block listed")


def case_nolib(a, tmp):
    """libunwind cannot be loaded (a private mount namespace hides it behind
    an empty file): one warning, sites off, the program runs normally."""
    real = os.path.realpath("/usr/lib/x86_64-linux-gnu/libunwind.so.8")
    rep = os.path.join(tmp, "r.json")
    env = clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_SITES="5", LOWTIDE_STATS_FILE=rep)
    script = 'mount --bind /dev/null "$1" && exec "$2" named'
    rc, out, err = run(["unshare", "-m", "sh", "-c", script, "sh", real, a.prog], env)
    check(rc == 0, f"exit status {rc}")
    lines = [ln for ln in err.splitlines() if ln.startswith("lowtide:")]
    check(len(lines) == 1 and "cannot load libunwind.so.8" in lines[0] and "call sites are off" in lines[0],
          f"one warning, got {lines}")
    if os.path.exists(rep):
        s = report_of(tmp)["sites"]
        check(s["enabled"] is False and s["top"] == [], f"sites off: {s}")
    else:
        check(False, "no report written")


# --- the sampled estimates against the truth --------------------------------
#
# A piece of c bytes through the countdown (an allocation, or a realloc's
# growth) is captured with p = 1 - exp(-c/T) and then counts its usable
# bytes x as x/p: an estimate F = sum x_i I_i / p_i, unbiased, of variance
# sum x_i^2 (1 - p_i) / p_i (blocks: x = 1, allocations only). Every check
# below computes that standard deviation from the pieces the program saw and
# first asserts that the 10 % allowed is far enough out: a normal tail bound
# (summed over the rounds for a maximum) of at most 2e-9, i.e. 6 sigma for a
# single figure, so that the test cannot flake; then that the estimate is
# within 10 %, less 0.2 % for the rounding of weights to 1/256 (sites.hpp).
INTERVAL = 1 << 20
FLAKE = 2e-9


def tail(z):
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def p_of(counted, interval):
    return 1.0 if interval == 0 else -math.expm1(-counted / interval)


def variance(pieces, interval, blocks=False):
    v = 0.0
    for counted, usable, birth in pieces:
        if blocks and not birth:
            continue
        x = 1.0 if blocks else float(usable)
        p = p_of(counted, interval)
        v += x * x * (1.0 - p) / p
    return v


def within(label, got, want, sds, true_sd=None):
    """got within 10 % of want. sds: the standard deviations of the
    estimates whose maximum got is (one for a plain figure); true_sd: the
    one of the estimate at the true maximum (the maximum can fall short)."""
    margin = 0.1 * want - 0.002 * want
    bound = sum(tail(margin / sd) for sd in sds if sd > 0) + tail(margin / (true_sd if true_sd is not None else max(sds)))
    sd = max(sds)
    check(bound <= FLAKE, f"{label}: test design: 10 % is only {margin / sd:.1f} sigma (sigma {sd:.4g}); "
                          f"a chance of {bound:.2g} to fail by luck")
    ok = abs(got - want) <= margin
    check(ok, f"{label}: estimate {got} vs exact {want} ({100.0 * (got - want) / want:+.1f} %, "
              f"{(got - want) / sd:+.1f} sigma, sigma {sd:.4g})")
    print(f"{label}: estimate {got}, exact {want}: {100.0 * (got - want) / want:+.2f} %, "
          f"{(got - want) / sd:+.2f} sigma (10 % = {margin / sd:.1f} sigma)")


def run_estimate(a, tmp, mode, interval, sites=50, all_listed=True):
    rc, out, err = run([a.estimate, mode], clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_SITES=str(sites),
                                                     LOWTIDE_SITE_SAMPLE=str(interval),
                                                     LOWTIDE_STATS_FILE=os.path.join(tmp, "r.json")))
    check(rc == 0, f"exit status {rc}: {err[-2000:]}")
    truth = json.loads(out)
    r = report_of(tmp)
    check(r["sites"]["sample_interval"] == interval, "sample_interval")
    check(not r["sites"]["table_full"], "the site table did not fill up")
    if all_listed:
        check(r["sites"]["not_shown"]["sites"] == 0, "every site listed")
    names = {sc["name"] for sc in truth["scenarios"]}
    rows = {}
    for row in r["sites"]["top"]:
        o = owner(row, names)
        if o is not None:
            check(o not in rows, f"{o}: one site, got another row {row['id']}")
            rows[o] = row
    for n in names:
        check(n in rows or not all_listed, f"{n}: a site row")
    return truth, r, rows


def case_estimate(a, tmp):
    truth, r, rows = run_estimate(a, tmp, "estimate", INTERVAL)
    by = {sc["name"]: sc for sc in truth["scenarios"]}
    for name, sc in by.items():
        row = rows.get(name)
        if row is None:
            continue
        pcs = sc["pieces"]
        sd_bytes = math.sqrt(variance(pcs, INTERVAL))
        sd_blocks = math.sqrt(variance(pcs, INTERVAL, blocks=True))
        within(f"{name} bytes", row["bytes"], sc["bytes"], [sd_bytes])
        if name == "est::growth":
            # Its blocks are born at the cutoff (about 144 KiB, p = 0.13):
            # 96 of them estimate the count to 26 %, not checked here. Every
            # piece is live at the end of the growth and none before: the
            # peak is the same estimate as the bytes.
            within(f"{name} peak", row["peak_live_bytes"], sc["peak"], [sd_bytes])
        elif name == "est::temporaries":
            within(f"{name} blocks", row["blocks"], sc["blocks"], [sd_blocks])
            # the peak: the largest of the rounds' estimates
            sds, at, k, best = [], 0, 0, 0.0
            for n in sc["rounds"]:
                part = pcs[at:at + n]
                at += n
                sds.append(math.sqrt(variance(part, INTERVAL)))
                true_round = sum(u for _, u, _ in part)
                if true_round == sc["peak"]:
                    best = sds[-1]
                k += 1
            within(f"{name} peak", row["peak_live_bytes"], sc["peak"], sds, true_sd=best)
        else:
            within(f"{name} blocks", row["blocks"], sc["blocks"], [sd_blocks])
            within(f"{name} live bytes", row["live_bytes"], sc["live"], [sd_bytes])
            within(f"{name} live blocks", row["live_blocks"], sc["blocks"], [sd_blocks])
            within(f"{name} peak", row["peak_live_bytes"], sc["peak"], [sd_bytes])
        if sc["live"] == 0:
            # a free takes back exactly what the block's pieces added
            check(row["live_bytes"] == 0 and row["live_blocks"] == 0,
                  f"{name}: nothing live at exit, got {row['live_bytes']} bytes, {row['live_blocks']} blocks")
    # The process ends at its peak (the long-lived blocks): the heap at the
    # peak is the live heap now.
    hp = r["sites"]["heap_at_peak"]
    check(r["large"]["live"] == r["large"]["peak_live"], "the program ends at its peak")
    check(hp["source"] == "now" and hp["live_then"] == r["large"]["live"], f"heap at peak from now: {hp}")
    for name, row in rows.items():
        check(row["at_peak_bytes"] == row["live_bytes"], f"{name}: at the peak {row['at_peak_bytes']} == live {row['live_bytes']}")


def at_peak_case(a, tmp, interval):
    truth, r, rows = run_estimate(a, tmp, "phases", interval)
    hp = r["sites"]["heap_at_peak"]
    check(hp["source"] == "copy", f"the peak was before exit: a copy, got {hp}")
    check(hp["process_peak_live"] == r["large"]["peak_live"], f"process peak {hp} vs {r['large']['peak_live']}")
    by = {sc["name"]: sc for sc in truth["scenarios"]}
    for name, want in truth["at_peak"].items():
        row = rows.get(name)
        if row is None:
            continue
        sc = by[name]
        if interval == 0:
            check(row["at_peak_bytes"] == want, f"{name}: at the process's peak {row['at_peak_bytes']} == {want}")
            check(row["peak_live_bytes"] == sc["peak"], f"{name}: its own peak {row['peak_live_bytes']} == {sc['peak']}")
        elif want == 0:
            check(row["at_peak_bytes"] == 0, f"{name}: nothing at the process's peak, got {row['at_peak_bytes']}")
        else:
            # every block of a and b was live at the peak
            within(f"{name} at the process's peak", row["at_peak_bytes"], want,
                   [math.sqrt(variance(sc["pieces"], interval))])
    # site c peaked on its own later, under the process's peak
    c = rows.get("est::site_c")
    if c is not None:
        check(c["peak_live_bytes"] > 0 and c["at_peak_bytes"] == 0, f"site c: own peak, none at the process's: {c}")
    if interval == 0:
        check_at_peak_sum(r)


def case_at_peak(a, tmp):
    at_peak_case(a, tmp, 0)


def case_at_peak_sampled(a, tmp):
    at_peak_case(a, tmp, INTERVAL)


def case_threads(a, tmp):
    """Four threads allocate, grow, shrink and free at once, then free all:
    every site's live figures go back to exactly zero (a free or shrink takes
    back what the block's pieces added, whoever sampled them)."""
    for interval in (0, 256 << 10):
        rep = os.path.join(tmp, "t%d.json" % interval)
        rc, out, err = run([a.estimate, "threads"], clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_SITES="200",
                                                            LOWTIDE_SITE_SAMPLE=str(interval), LOWTIDE_STATS_FILE=rep))
        check(rc == 0, f"exit status {rc}: {err[-2000:]}")
        with open(rep) as f:
            r = json.load(f)
        s = r["sites"]
        check(r["large"]["live"] == 0, f"nothing live: {r['large']['live']}")
        check(len(s["top"]) >= 2 and s["not_shown"]["sites"] == 0, f"sites listed: {len(s['top'])}")
        check(sum(row["captured"] for row in s["top"]) > 100, "captures made")
        for row in s["top"]:
            check(row["live_bytes"] == 0 and row["live_blocks"] == 0,
                  f"T={interval}: site {row['id']} back to zero: {row['live_bytes']} bytes, {row['live_blocks']} blocks")
        hp = s["heap_at_peak"]
        check(hp["source"] == "copy" and 0 < hp["live_then"] <= hp["process_peak_live"], f"a copy was taken: {hp}")
        check(s["not_shown"]["at_peak_bytes"] + sum(row["at_peak_bytes"] for row in s["top"]) > 0, "sites at the peak")
        if interval == 0:
            check(sum(row["remaps"] for row in s["top"]) > 0, "some growth moved a block")


# --- flame graphs ------------------------------------------------------------

def expected_stacks(r, key):
    """What the collapsed file must hold, computed here from the report."""
    want = {}
    for row in r["sites"]["top"]:
        names = []
        for f in reversed(row["frames"]):
            n = f["function"] or "%s+%#x" % (os.path.basename(f["module"]), f["offset"])
            names.append(n.replace(";", ":"))
        st = ";".join(names) if names else "[stacks seen after the site table filled up]"
        want[st] = want.get(st, 0) + row[key]
    rest = r["sites"]["not_shown"][key]
    if rest:
        want["[sites not listed in the report]"] = rest
    return {k: v for k, v in want.items() if v > 0}


def read_collapsed(path):
    got = {}
    with open(path) as f:
        for line in f:
            st, _, v = line.rstrip("\n").rpartition(" ")
            check(st and v.isdigit(), f"collapsed line {line!r}")
            check(st not in got, f"one line per stack: {st}")
            got[st] = int(v)
    return got


def check_svg(path, stacks):
    root = ET.parse(path).getroot()  # well-formed XML, or this raises
    ns = "{http://www.w3.org/2000/svg}"
    check(root.tag == ns + "svg", f"an svg document: {root.tag}")
    rects = root.findall(f".//{ns}rect")
    nodes = {(): sum(stacks.values())}
    for st, v in stacks.items():
        parts = tuple(st.split(";"))
        for i in range(1, len(parts) + 1):
            nodes[parts[:i]] = nodes.get(parts[:i], 0) + v
    check(len(rects) == len(nodes), f"one rect per frame node: {len(rects)} rects, {len(nodes)} nodes")
    total = nodes[()]
    full = max(float(x.get("width")) for x in rects)
    by_depth = {}
    for x in rects:
        b, w = int(x.get("data-bytes")), float(x.get("width"))
        check(abs(w - full * b / total) <= 1e-3, f"width {w} proportional to {b} bytes of {total} ({full} px)")
        by_depth.setdefault(int(x.get("data-depth")), []).append(b)
    for d in by_depth:
        want = sorted(v for k, v in nodes.items() if len(k) == d)
        check(sorted(by_depth[d]) == want, f"depth {d}: the nodes' bytes {sorted(by_depth[d])} == {want}")
    titles = root.findall(f".//{ns}g/{ns}title")
    check(len(titles) == len(rects), "a title per frame")


def case_flame(a, tmp):
    truth, r, rows = run_estimate(a, tmp, "phases", 0, sites=2, all_listed=False)
    rep = os.path.join(tmp, "r.json")
    check(r["sites"]["not_shown"]["sites"] >= 1, "a site beyond the 2 shown, summed as not shown")
    for of, key in (("peak", "at_peak_bytes"), ("total", "bytes")):
        svg, txt = os.path.join(tmp, of + ".svg"), os.path.join(tmp, of + ".txt")
        env = clean_env()
        argv = [a.launcher, "report", "--flame", svg, "--collapsed", txt, rep]
        if of == "total":
            argv[2:2] = ["--flame-of", "total"]
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        check(p.returncode == 0, f"{argv}: exit {p.returncode}: {p.stderr}")
        got = read_collapsed(txt)
        want = expected_stacks(r, key)
        check(got == want, f"{of}: collapsed stacks {got} == the report's {want}")
        total = sum(row[key] for row in r["sites"]["top"]) + r["sites"]["not_shown"][key]
        check(sum(got.values()) == total, f"{of}: collapsed sum {sum(got.values())} == the sites' {total}")
        if of == "peak":
            check(total == r["sites"]["heap_at_peak"]["live_then"], "the flame graph of the peak adds up to it")
        check_svg(svg, got)
    # Characters XML does not allow (a command line's escape or control
    # bytes, a frame's file name) still make a document that parses (before:
    # ET.parse refused it).
    with open(rep) as f:
        odd = json.load(f)
    odd["command"] = "prog \x1b[31m\x01 red"
    if odd["sites"]["top"] and odd["sites"]["top"][0]["frames"]:
        odd["sites"]["top"][0]["frames"][0].update(function=None, module="/tmp/lib\x02odd.so")
    odd_rep, odd_svg = os.path.join(tmp, "odd.json"), os.path.join(tmp, "odd.svg")
    with open(odd_rep, "w") as f:
        json.dump(odd, f)
    p = subprocess.run([a.launcher, "report", "--flame", odd_svg, odd_rep], env=clean_env(), capture_output=True,
                       text=True, timeout=TIMEOUT)
    check(p.returncode == 0, f"odd characters: exit {p.returncode}: {p.stderr}")
    try:
        ET.parse(odd_svg)
        check(True, "")
    except ET.ParseError as e:
        check(False, f"the flame graph of a report with control characters is XML: {e}")
    # two reports: the same stacks add up
    twice = os.path.join(tmp, "twice.txt")
    p = subprocess.run([a.launcher, "report", "--collapsed", twice, rep, rep], env=clean_env(), capture_output=True,
                       text=True, timeout=TIMEOUT)
    check(p.returncode == 0, f"two reports: exit {p.returncode}: {p.stderr}")
    want = {k: 2 * v for k, v in expected_stacks(r, "at_peak_bytes").items()}
    check(read_collapsed(twice) == want, "two reports' stacks add up")
    # no sites: an error, no file
    off = os.path.join(tmp, "off.json")
    rc, _, _ = run([a.estimate, "phases"], clean_env(a.lib, LOWTIDE_STATS="json", LOWTIDE_STATS_FILE=off))
    check(rc == 0, "run without sites")
    env = clean_env()
    none = os.path.join(tmp, "none.svg")
    p = subprocess.run([a.launcher, "report", "--flame", none, off], env=env, capture_output=True, text=True,
                       timeout=TIMEOUT)
    check(p.returncode == 1 and "no report has call sites" in p.stderr and not os.path.exists(none),
          f"no sites: exit 1 and a message, no file: {p.returncode} {p.stderr!r}")


CASES = {"nolib": case_nolib, "named": case_named, "limit": case_limit, "sampled": case_sampled, "dlopen": case_dlopen,
         "bad": case_bad, "off": case_off, "estimate": case_estimate, "at_peak": case_at_peak,
         "at_peak_sampled": case_at_peak_sampled, "flame": case_flame, "threads": case_threads}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--lib", required=True)
    ap.add_argument("--prog", required=True)
    ap.add_argument("--dlopen")
    ap.add_argument("--target")
    ap.add_argument("--estimate")
    ap.add_argument("--launcher")
    a = ap.parse_args()
    if a.case == "nolib" and (os.geteuid() != 0 or not os.path.exists("/usr/lib/x86_64-linux-gnu/libunwind.so.8")):
        print("SKIP: needs root (a private mount namespace) and Debian's libunwind.so.8")
        return 77
    lttest.run_case(CASES[a.case], a, "lowtide-sites-")
    return 0


if __name__ == "__main__":
    sys.exit(main())
