"""`lowtide compare`: one command under several allocators, RSS over time."""
import glob
import json
import os
import shlex
import subprocess
import sys
import sysconfig
import time

from . import plot, preload, proctree, report_cmd, reports
from .outfile import create_new, discard, put_in_place, write_new
from .units import mib

# Peer allocators as Debian ships them: (soname, package).
PEERS = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
}
# Tuned peers: an allocator (None: glibc) with the settings that make it give
# memory back soon, exactly as docs and README quote them. A preset's run
# gets these variables set to these values and nothing else changed.
PRESETS = {
    "glibc-tuned": (None, {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"}),
    "jemalloc-tuned": ("jemalloc", {"MALLOC_CONF": "background_thread:true,dirty_decay_ms:500,muzzy_decay_ms:0"}),
}
KNOWN = ["glibc"] + list(PEERS) + list(PRESETS)


def describe_known():
    """The allocators --with takes, for --help."""
    return ", ".join(KNOWN[:1 + len(PEERS)]) + "; tuned presets: " + "; ".join(
        "%s (%s)" % (n, " ".join("%s=%s" % kv for kv in env.items())
                     + (" with %s" % base if base else ""))
        for n, (base, env) in PRESETS.items())
REPORT_GLOB = "lowtide-report.*.json"


def peer_libdir():
    # LOWTIDE_PEER_LIBDIR: for systems that keep the peers elsewhere.
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    return os.environ.get("LOWTIDE_PEER_LIBDIR", os.path.join("/usr/lib", multiarch))


def shown(text):
    """text (a command-line argument or a path) as valid text: bytes that
    are not UTF-8 (os.fsdecode's surrogates) as \\xNN. compare.md and the
    printed table are UTF-8; a surrogate there was a UnicodeEncodeError
    after every run had been made."""
    return os.fsencode(text).decode("utf-8", "backslashreplace")


def say(msg):
    print("lowtide compare: " + msg, file=sys.stderr, flush=True)


def plan(lib, peers_arg):
    """[(name, preload path or None)] to run, lowtide last; None after an
    error message if peers_arg names an allocator we do not know."""
    names = [n.strip() for n in peers_arg.split(",") if n.strip()]
    unknown = [n for n in names if n not in KNOWN and n != "lowtide"]
    if unknown:
        say("unknown allocator(s) %s; known: %s" % (", ".join(unknown), ", ".join(KNOWN)))
        return None
    runs = []
    for n in dict.fromkeys(names):
        base = PRESETS[n][0] if n in PRESETS else n
        if base is None or base == "glibc":
            runs.append((n, None))
        elif base in PEERS:
            so, deb = PEERS[base]
            path = os.path.join(peer_libdir(), so)
            if os.path.isfile(path):
                runs.append((n, path))
            else:
                say("%s skipped: %s not found (Debian: apt-get install %s)" % (n, path, deb))
    runs.append(("lowtide", lib))
    return runs


def run_env(name, lib, out):
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and (name == "lowtide" or not k.startswith("LOWTIDE_"))}
    if name == "lowtide":
        # LOWTIDE_STATS_FILE is a pattern: a "%" of the directory's own
        # ("--out 100%", "run%p") doubled, or lowtide would write elsewhere.
        return preload.lowtide_env(lib, env, stats="json",
                                   stats_file=os.path.join(out.replace("%", "%%"), REPORT_GLOB.replace("*", "%p")))
    if lib:
        env["LD_PRELOAD"] = lib
    if name in PRESETS:
        env.update(PRESETS[name][1])
    return env


def measure(command, env, out, name, interval):
    """Run command to its end, sampling its process tree's RSS. Its output
    goes to out/NAME.out and .err (outfile.create_new: made as lowtide makes
    its reports, docs/security.md, and renamed into place at the end)."""
    so, so_tmp = create_new(out)
    try:
        se, se_tmp = create_new(out)
    except BaseException:
        so.close()
        discard(so_tmp)
        raise
    try:
        with so, se:
            r = _measure(command, env, so, se, name, interval)
    except BaseException:
        discard(so_tmp)
        discard(se_tmp)
        raise
    put_in_place(so_tmp, out, name + ".out")
    put_in_place(se_tmp, out, name + ".err")
    return r


def _measure(command, env, so, se, name, interval):
    """measure's run, its stdout and stderr to the files so and se."""
    t0 = time.monotonic()
    p = subprocess.Popen(command, env=env, stdout=so, stderr=se, stdin=subprocess.DEVNULL)
    samples, seen, status, ru = [], False, None, None
    needle = os.path.basename(env.get("LD_PRELOAD", "")) or None
    try:
        while True:
            rss, alive = proctree.tree_rss(p.pid)
            now = time.monotonic() - t0
            if alive:
                samples.append((round(now, 4), rss))
                if needle and not seen:
                    seen = proctree.maps_contain(p.pid, needle)
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            time.sleep(max(0.0, interval - (time.monotonic() - t0 - now)))
    except BaseException:
        p.kill()
        p.wait()
        raise
    wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return {"allocator": name, "exit": p.returncode, "wall_s": round(wall, 3),
            "peak_rss": max((r for _, r in samples), default=0),
            "end_rss": samples[-1][1] if samples else 0,
            # ru_maxrss (KiB): the largest resident set of any one process
            # of the tree, taken by the kernel, so no peak slips between samples.
            "max_process_rss": ru.ru_maxrss * 1024,
            "preload_seen": seen if needle else None, "samples": samples}


def table(results):
    lines = ["| allocator | exit | wall time, s | peak RSS, MiB | RSS at end, MiB | "
             "largest process peak, MiB | samples |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append("| %s | %d | %.2f | %s | %s | %s | %d |"
                     % (r["allocator"], r["exit"], r["wall_s"], mib(r["peak_rss"]), mib(r["end_rss"]),
                        mib(r["max_process_rss"]), len(r["samples"])))
    return lines


NOTES = ["peak RSS and RSS at end: the RSS of the command's whole process tree, sampled every "
         "~20 ms; RSS at end is the last sample before the command exited.",
         "largest process peak: the kernel's high-water mark (ru_maxrss) of the largest single "
         "process in the tree, which no sampling gap can miss."]


def main(lib, command, peers, out, interval):
    runs = plan(lib, peers)
    if runs is None:
        return 2
    # An --out that cannot be made or written: said, not a traceback (nor,
    # at the first run's output file, "cannot run CMD").
    try:
        os.makedirs(out, exist_ok=True)
        # The directory's own "[", "*" or "?" are not a pattern (glob.escape).
        for old in glob.glob(os.path.join(glob.escape(out), REPORT_GLOB)):
            os.remove(old)
    except OSError as e:
        say("cannot use %s for the output: %s" % (out, e.strerror or e))
        return 2
    if os.environ.get("LD_PRELOAD"):
        say("LD_PRELOAD=%s is left out of every run, so each run has only its allocator"
            % os.environ["LD_PRELOAD"])
    cant_plot = plot.available()
    results = []
    for name, path in runs:
        say("running under %s%s" % (name, " (LD_PRELOAD=%s)" % path if path else ""))
        try:
            r = measure(command, run_env(name, path, out), out, name, interval)
        except OSError as e:
            if e.filename is not None and os.path.normpath(os.path.dirname(str(e.filename))) == os.path.normpath(out):
                say("cannot write %s: %s" % (e.filename, e.strerror))
                return 2
            say("cannot run %s: %s" % (command[0], e.strerror))
            return 127
        say("  %s: exit %d, %.2f s, peak %s MiB, at end %s MiB"
            % (name, r["exit"], r["wall_s"], mib(r["peak_rss"]), mib(r["end_rss"])))
        if r["preload_seen"] is False:
            say("  %s: %s was not seen in the process's maps (it may have exited before the "
                "first sample, or the preload did not take)" % (name, os.path.basename(path)))
        results.append(r)

    cmdline = " ".join(shlex.quote(shown(c)) for c in command)
    if cant_plot:
        say(cant_plot)
    else:
        write_new(out, "rss.png", lambda f: plot.rss_plot([(r["allocator"], r["samples"]) for r in results],
                                                          cmdline[:100], f))
    md = ["# lowtide compare", "", "Command: `%s`" % cmdline, ""]
    md += [] if cant_plot else ["![RSS over time](rss.png)", ""]
    md += table(results) + [""] + ["- " + n for n in NOTES] + [""]
    failed = [r["allocator"] for r in results if r["exit"] != 0]
    if failed:
        md += ["The command failed under: %s (see %s/<allocator>.err)." % (", ".join(failed), shown(out)), ""]
    md += lowtide_section(out)
    samples = json.dumps({"command": command, "interval_s": interval, "runs": results})
    write_new(out, "samples.json", lambda f: f.write(samples.encode()))
    write_new(out, "compare.md", lambda f: f.write("\n".join(md).encode("utf-8")))
    print("\n".join(md), flush=True)
    say("wrote %s" % ", ".join(os.path.join(out, n) for n in
                               (["compare.md", "samples.json"] + ([] if cant_plot else ["rss.png"]))))
    return 0 if not failed else 1


def lowtide_section(out):
    """The compare.md section with lowtide's merged report(s)."""
    files = sorted(glob.glob(os.path.join(glob.escape(out), REPORT_GLOB)))
    rows, total, problems = reports.load_and_merge(files)
    for p in problems:
        say(p)
    md = ["## lowtide's report", ""]
    if not rows:
        say("lowtide wrote no report in %s" % out)
        return md + ["lowtide wrote no report: the command was not run under lowtide (a static binary, "
                     "a refused preload) or was killed by a signal.", ""]
    return md + ["From %d JSON report(s) in %s (`lowtide report %s` shows it again):"
                 % (len(rows), shown(out), shown(os.path.join(out, REPORT_GLOB))), "", "```"] \
        + report_cmd.summary_lines(rows, total) + ["```", ""]
