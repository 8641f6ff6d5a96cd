"""`lowtide` argument parsing and dispatch to the subcommands."""
import argparse
import os
import sys

from . import locate

DESCRIPTION = """\
lowtide: run programs under the lowtide allocator and look at what it did.

  lowtide run [--cutoff SIZE] [--stats text|json|both|prometheus] [--stats-file PATH] -- CMD ARGS...
  lowtide lib
  lowtide compare [--with glibc,jemalloc,...,glibc-tuned,jemalloc-tuned] [--out DIR] -- CMD ARGS...
  lowtide report [--json] [--flame OUT.svg] [--collapsed OUT.txt] [--flame-of peak|total] FILE...
  lowtide doctor [--timeout S] [-- CMD ARGS...]
  lowtide --version
  lowtide stats [--json] PID
  lowtide top [--interval S] [--count N] PID
"""


def split_command(argv):
    """argv before `--` and the command after it (None without `--`).
    Taken apart by hand so options of CMD never reach argparse."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def seconds(text):
    """A positive, finite number of seconds, for argparse: -1 or nan reached
    time.sleep (a ValueError traceback after the first line of top)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a number of seconds" % text)
    if not (0 < v < float("inf")):
        raise argparse.ArgumentTypeError("%r: must be a positive number of seconds" % text)
    return v


def positive_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a whole number" % text)
    if v < 1:
        raise argparse.ArgumentTypeError("%r: must be 1 or more" % text)
    return v


def parser():
    from . import compare_cmd  # for --with's list of allocators and presets
    p = argparse.ArgumentParser(prog="lowtide", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="store_true", help="print lowtide's version and exit")
    sub = p.add_subparsers(dest="cmd", metavar="SUBCOMMAND")

    r = sub.add_parser("run", help="run CMD with lowtide preloaded (exec, so exit status and signals pass through)",
                       description="Run CMD with liblowtide.so put first in LD_PRELOAD (entries already "
                                   "there are kept) and the given settings as LOWTIDE_* variables. "
                                   "lowtide execs CMD: same pid, same exit status, same signals.",
                       usage="lowtide run [options] -- CMD [ARGS...]")
    r.add_argument("--cutoff", metavar="SIZE", help="LOWTIDE_CUTOFF: blocks this large and larger take "
                                                    "the large path (e.g. 512K, 1MiB)")
    r.add_argument("--stats", choices=["text", "json", "both", "prometheus"],
                   help="LOWTIDE_STATS: write a report at exit in this format")
    r.add_argument("--stats-file", metavar="PATH",
                   help="LOWTIDE_STATS_FILE: where the report goes (%%p = pid); without --stats, "
                        "a name ending in .json means json, anything else text (a name ending in "
                        ".prom is written in the Prometheus format whatever the format)")

    sub.add_parser("lib", help="print the absolute path of liblowtide.so",
                   description="Print the absolute path of liblowtide.so, for LD_PRELOAD=$(lowtide lib).")

    c = sub.add_parser("compare", help="run CMD under each allocator; RSS plot and table",
                       description="Run CMD once under each allocator and under lowtide, sample the RSS of "
                                   "its whole process tree every 20 ms, and write DIR/rss.png (RSS over "
                                   "time), DIR/compare.md (the table, also printed), DIR/samples.json, "
                                   "each run's output (DIR/<allocator>.out, .err) and lowtide's reports.",
                       usage="lowtide compare [--with A,B,...] [--out DIR] -- CMD [ARGS...]")
    c.add_argument("--with", dest="peers", default="glibc,jemalloc,mimalloc,tcmalloc",
                   help="allocators to compare lowtide with: %s (default: %%(default)s)"
                        % compare_cmd.describe_known())
    c.add_argument("--out", default="lowtide-compare", help="output directory (default: %(default)s)")
    c.add_argument("--interval", type=float, default=0.02, help=argparse.SUPPRESS)

    rep = sub.add_parser("report", help="merge JSON reports (one per process) into one summary",
                         description="Read lowtide JSON reports (LOWTIDE_STATS=json, e.g. one per process "
                                     "through %%p in LOWTIDE_STATS_FILE) and print one summary: a row per "
                                     "process and the total.")
    rep.add_argument("files", nargs="+", metavar="FILE")
    rep.add_argument("--json", action="store_true", help="print the merged summary as JSON")
    rep.add_argument("--flame", metavar="OUT.svg", help="also write a flame graph of the call sites (SVG)")
    rep.add_argument("--collapsed", metavar="OUT.txt",
                     help="also write the call sites as collapsed stacks (flamegraph.pl, speedscope)")
    rep.add_argument("--flame-of", choices=["peak", "total"], default="peak",
                     help="what the flame graph weighs: bytes live at the process's peak (default) "
                          "or bytes allocated")

    d = sub.add_parser("doctor", help="what on this machine, and in CMD, matters to lowtide",
                       description="Print what on this machine matters to lowtide (transparent huge pages, "
                                   "overcommit, vm.max_map_count, the memory limit lowtide sees, the "
                                   "environment) and, given CMD, run it under lowtide and say whether "
                                   "lowtide really serves its malloc, process by process, with a warning "
                                   "for each thing that will surprise (a statically linked or setuid "
                                   "program, a process that ran without lowtide, reports that would "
                                   "overwrite each other). Exit status 0: nothing to warn about; 1: warnings.",
                       usage="lowtide doctor [--timeout S] [-- CMD [ARGS...]]")
    d.add_argument("--timeout", type=seconds, metavar="S",
                   help="stop CMD (SIGTERM) after S seconds, e.g. for a server (default: wait for its end)")
    # Tests point this at a fake tree: S/sys/kernel/mm/..., S/proc/sys/vm/...,
    # and the cgroup files (LOWTIDE_CGROUP_ROOT for the library).
    d.add_argument("--sysroot", default="/", help=argparse.SUPPRESS)

    st = sub.add_parser("stats", help="a running process's memory and counters, read from outside",
                        description="Ask a running process (started under lowtide) for its counters, "
                                    "through its lowtide-live socket: no signal, no stop. Shows RSS broken "
                                    "down into lowtide's parts, the threads and call sites holding the most. "
                                    "Same user or root only. In a container: nsenter -t PID -n lowtide stats PID.")
    st.add_argument("pid", type=int, metavar="PID")
    st.add_argument("--json", action="store_true", help="print the process's answer as JSON")
    st.add_argument("--timeout", type=seconds, default=10.0, help=argparse.SUPPRESS)
    tp = sub.add_parser("top", help="`lowtide stats` every interval, one line each",
                        description="Query a running process every --interval seconds and print one line "
                                    "per answer: RSS and its parts, and the thread holding the most.")
    tp.add_argument("pid", type=int, metavar="PID")
    tp.add_argument("--interval", type=seconds, default=1.0, help="seconds between lines (default: %(default)s)")
    tp.add_argument("--count", type=positive_int, default=None, metavar="N", help="stop after N lines")
    tp.add_argument("--timeout", type=seconds, default=10.0, help=argparse.SUPPRESS)
    return p


def main(argv, lib_candidates, build_hint, version=None):
    """version: the launcher's (configured at install); None: the version
    of the build directory the library is found in."""
    try:
        return dispatch(argv, lib_candidates, build_hint, version)
    except BrokenPipeError:
        # `lowtide report ... | head`: the reader left; not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def entry():
    """The `lowtide` command of a pip install (pyproject.toml's entry
    point): the library is the one in this package."""
    return main(sys.argv[1:], [locate.packaged_library()], "reinstall lowtide (pip install .)",
                locate.packaged_version())


def dispatch(argv, lib_candidates, build_hint, version=None):
    opts, command = split_command(argv)
    p = parser()
    a, extra = p.parse_known_args(opts)
    if extra and a.cmd in ("run", "compare") and command is None:
        p.error("%s needs `--` before the command: lowtide %s [options] -- %s"
                % (a.cmd, a.cmd, " ".join(extra)))
    if extra:
        p.error("unrecognized arguments: %s" % " ".join(extra))
    if a.version:
        if a.cmd is not None or command is not None:
            p.error("--version takes no subcommand")
        version = version or locate.build_version(locate.find_library(lib_candidates, build_hint, quiet=True))
        if version is None:
            print("lowtide: version unknown (no installed or built lowtide found)", file=sys.stderr)
            return 1
        print("lowtide " + version)
        return 0
    if a.cmd is None:
        p.print_help()
        return 2
    if a.cmd in ("run", "compare") and not command:
        p.error("%s needs a command after `--`, e.g. lowtide %s -- python3 app.py" % (a.cmd, a.cmd))
    if a.cmd in ("lib", "report", "stats", "top") and command is not None:
        p.error("%s takes no command after --" % a.cmd)

    if a.cmd == "report":
        from . import report_cmd
        return report_cmd.main(a.files, as_json=a.json, flame_svg=a.flame, collapsed_txt=a.collapsed,
                               flame_of=a.flame_of)
    if a.cmd in ("stats", "top"):
        from . import stats_cmd
        if a.cmd == "stats":
            return stats_cmd.main_stats(a.pid, as_json=a.json, timeout=a.timeout)
        return stats_cmd.main_top(a.pid, interval=a.interval, count=a.count, timeout=a.timeout)
    lib = locate.find_library(lib_candidates, build_hint)
    if lib is None:
        return 1
    from . import preload
    why = preload.unpreloadable(lib)
    if a.cmd == "lib":
        print(lib)
        if why is not None:
            print("lowtide lib: warning: %s" % why, file=sys.stderr)
        return 0
    if why is not None:
        print("lowtide %s: %s" % (a.cmd, why), file=sys.stderr)
        return 1
    if a.cmd == "doctor":
        from . import doctor_cmd
        return doctor_cmd.main(lib, command, version=version or locate.build_version(lib),
                               timeout=a.timeout, sysroot=a.sysroot)
    if a.cmd == "run":
        from . import run_cmd
        return run_cmd.main(lib, command, cutoff=a.cutoff, stats=a.stats, stats_file=a.stats_file)
    from . import compare_cmd
    return compare_cmd.main(lib, command, peers=a.peers, out=a.out, interval=a.interval)
