"""What the real-program tests share: running a command with and without
lowtide (the same clean environment otherwise, a timeout on every run),
proof that lowtide really was in the processes (each one writes a JSON
report of its own), and failed checks collected rather than fatal."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from lttest import check, clean_env, failures, finish  # noqa: E402,F401


def base_env(**kv):
    """Deterministic locale and time zone, no inherited LD_PRELOAD or LOWTIDE_*."""
    return clean_env(**{"LC_ALL": "C.UTF-8", "TZ": "UTC", **kv})


class Runner:
    """Runs commands either plainly or under lowtide; under lowtide every
    process (children included: the name has %p) writes a JSON report."""

    def __init__(self, lib, under_lowtide):
        self.lib = lib
        self.under = under_lowtide
        self.reports = tempfile.mkdtemp(prefix="lowtide-real-reports-")

    def env(self, **kv):
        env = base_env(**kv)
        if self.under:
            env.update(LD_PRELOAD=self.lib, LOWTIDE_STATS="json",
                       LOWTIDE_STATS_FILE=os.path.join(self.reports, "r.%p.json"))
        return env

    def run(self, argv, timeout=300, input=None, cwd=None, **kv):
        p = subprocess.run(argv, env=self.env(**kv), cwd=cwd, input=input, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    def report_totals(self):
        """(processes that reported, their malloc+calloc+realloc calls, large blocks mapped)."""
        procs = calls = large = 0
        for path in glob.glob(os.path.join(self.reports, "r.*.json")):
            with open(path) as f:
                r = json.load(f)
            procs += 1
            c = r["totals"]["calls"]
            calls += c["malloc"] + c["calloc"] + c["realloc"]
            large += r["large"]["maps"]
        return procs, calls, large


def check_lowtide_was_there(runner, what, want_large=True):
    procs, calls, large = runner.report_totals()
    print(f"{what}: {procs} processes under lowtide reported {calls} allocation calls, {large} large blocks")
    check(procs > 0 and calls > 0, f"{what}: no lowtide report from any process (was the shim loaded?)")
    if want_large:
        check(large > 0, f"{what}: no large block went through lowtide's large path")


def with_and_without(lib, what, session):
    """Runs session(runner, workdir) plainly, then under lowtide, each in a
    fresh temporary directory, and checks that lowtide really was in the
    second run. Returns (plain result, result under lowtide)."""
    results = {}
    for under in (False, True):
        work = tempfile.mkdtemp(prefix="lowtide-real-")
        runner = Runner(lib, under)
        results[under] = session(runner, work)
        shutil.rmtree(work)
        if under:
            check_lowtide_was_there(runner, what)
    return results[False], results[True]


def check_same_steps(what, plain, lt):
    """plain and lt are lists of (step, exit status, output): each step must
    give the same status and output under lowtide."""
    check(len(plain) == len(lt), f"{what}: different number of steps: {len(plain)} vs {len(lt)}")
    for (step, rc1, o1), (_, rc2, o2) in zip(plain, lt):
        check(rc1 == rc2 and o1 == o2, f"{what} {step}: output differs under lowtide "
                                       f"(exit {rc1} vs {rc2}, {len(o1)} vs {len(o2)} bytes)")
