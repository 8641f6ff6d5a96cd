"""`lowtide` argument parsing and dispatch to the subcommands."""
import argparse
import os
import sys

from . import locate

DESCRIPTION = """\
lowtide: run programs under the lowtide allocator and look at what it did.

  lowtide run [--cutoff SIZE] [--stats text|json|both] [--stats-file PATH] -- CMD ARGS...
  lowtide lib
  lowtide compare [--with glibc,jemalloc,...,glibc-tuned,jemalloc-tuned] [--out DIR] -- CMD ARGS...
  lowtide report [--json] FILE...
"""


def split_command(argv):
    """argv before `--` and the command after it (None without `--`).
    Taken apart by hand so options of CMD never reach argparse."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def parser():
    from . import compare_cmd  # for --with's list of allocators and presets
    p = argparse.ArgumentParser(prog="lowtide", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", metavar="SUBCOMMAND")

    r = sub.add_parser("run", help="run CMD with lowtide preloaded (exec, so exit status and signals pass through)",
                       description="Run CMD with liblowtide.so put first in LD_PRELOAD (entries already "
                                   "there are kept) and the given settings as LOWTIDE_* variables. "
                                   "lowtide execs CMD: same pid, same exit status, same signals.",
                       usage="lowtide run [options] -- CMD [ARGS...]")
    r.add_argument("--cutoff", metavar="SIZE", help="LOWTIDE_CUTOFF: blocks this large and larger take "
                                                    "the large path (e.g. 512K, 1MiB)")
    r.add_argument("--stats", choices=["text", "json", "both"],
                   help="LOWTIDE_STATS: write a report at exit in this format")
    r.add_argument("--stats-file", metavar="PATH",
                   help="LOWTIDE_STATS_FILE: where the report goes (%%p = pid); without --stats, "
                        "a name ending in .json means json, anything else text")

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
    return p


def main(argv, lib_candidates, build_hint):
    try:
        return dispatch(argv, lib_candidates, build_hint)
    except BrokenPipeError:
        # `lowtide report ... | head`: the reader left; not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def dispatch(argv, lib_candidates, build_hint):
    opts, command = split_command(argv)
    p = parser()
    a, extra = p.parse_known_args(opts)
    if extra and a.cmd in ("run", "compare") and command is None:
        p.error("%s needs `--` before the command: lowtide %s [options] -- %s"
                % (a.cmd, a.cmd, " ".join(extra)))
    if extra:
        p.error("unrecognized arguments: %s" % " ".join(extra))
    if a.cmd is None:
        p.print_help()
        return 2
    if a.cmd in ("run", "compare") and not command:
        p.error("%s needs a command after `--`, e.g. lowtide %s -- python3 app.py" % (a.cmd, a.cmd))
    if a.cmd in ("lib", "report") and command is not None:
        p.error("%s takes no command after --" % a.cmd)

    if a.cmd == "report":
        from . import report_cmd
        return report_cmd.main(a.files, as_json=a.json)
    lib = locate.find_library(lib_candidates, build_hint)
    if lib is None:
        return 1
    if a.cmd == "lib":
        print(lib)
        return 0
    if a.cmd == "run":
        from . import run_cmd
        return run_cmd.main(lib, command, cutoff=a.cutoff, stats=a.stats, stats_file=a.stats_file)
    from . import compare_cmd
    return compare_cmd.main(lib, command, peers=a.peers, out=a.out, interval=a.interval)
