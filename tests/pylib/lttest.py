"""What the Python test scripts share: failed checks collected rather than
fatal (a test reports every broken property, not just the first), a clean
lowtide environment for child processes, and runs bounded by a timeout.

Scripts find this module with
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
so they also run by hand, outside meson."""
import os
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def finish(name=None):
    """Exit 1 with a count if any check failed; else print "PASS name" (or
    "ok")."""
    label = f"{name}: " if name else ""
    if failures:
        print(f"{label}{len(failures)} check(s) failed", flush=True)
        sys.exit(1)
    print(f"PASS {name}" if name else "ok", flush=True)


def clean_env(lib=None, **kv):
    """This process's environment without LD_PRELOAD and LOWTIDE_* (meson's
    preload_env sets them for other tests, and an inherited
    LOWTIDE_OWNER_PID would make the child skip its report), with lib
    preloaded if given, plus kv."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("LOWTIDE_")}
    if lib:
        env["LD_PRELOAD"] = lib
    env.update(kv)
    return env


def run(argv, env, timeout, show_failure=False, **kw):
    """Runs argv to completion (at most timeout seconds); returns (exit
    status, stdout, stderr). show_failure: print both streams when the
    status is not 0."""
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, **kw)
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    if show_failure and p.returncode != 0:
        print("stdout:", out, "\nstderr:", err[-4000:], sep="\n", flush=True)
    return p.returncode, out, err


def run_case(case, args, prefix):
    """Runs case(args, tmp) in a fresh temporary directory, then finish()es:
    the one-case-per-meson-test scripts' main."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        case(args, tmp)
    finish()
