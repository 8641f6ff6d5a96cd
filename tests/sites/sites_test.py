#!/usr/bin/python3
"""Call sites (LOWTIDE_SITES): runs a program under lowtide with sites on and
checks the report's site table and live-at-exit list. One case per meson test:

  sites_test.py CASE --lib LIB --prog SITES_PROG [--dlopen EXE --target LIB]

Every child run is bounded by a timeout; the programs arm their own
watchdogs too."""
import argparse
import json
import os
import sys

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
        check(row["captured"] == d["blocks"] and row["blocks"] == d["blocks"], f"{nm}: blocks {row['blocks']} == {d['blocks']}")
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


CASES = {"nolib": case_nolib, "named": case_named, "limit": case_limit, "sampled": case_sampled, "dlopen": case_dlopen,
         "bad": case_bad, "off": case_off}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--lib", required=True)
    ap.add_argument("--prog", required=True)
    ap.add_argument("--dlopen")
    ap.add_argument("--target")
    a = ap.parse_args()
    if a.case == "nolib" and (os.geteuid() != 0 or not os.path.exists("/usr/lib/x86_64-linux-gnu/libunwind.so.8")):
        print("SKIP: needs root (a private mount namespace) and Debian's libunwind.so.8")
        return 77
    lttest.run_case(CASES[a.case], a, "lowtide-sites-")
    return 0


if __name__ == "__main__":
    sys.exit(main())
