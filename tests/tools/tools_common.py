"""What the tools tests share: running the launcher with a clean lowtide
environment, bounded by a timeout, and collecting failed checks."""
import os
import subprocess
import sys

TIMEOUT = 120
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def clean_env(**kv):
    """This process's environment without LD_PRELOAD and LOWTIDE_* (meson's
    preload_env sets them for other tests), plus kv."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("LOWTIDE_")}
    env.update(kv)
    return env


def run(argv, env, timeout=TIMEOUT, **kw):
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, **kw)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def finish():
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
    print("ok")
