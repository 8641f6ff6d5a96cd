"""`lowtide run` and `lowtide lib` from the source tree:

  run_test.py LAUNCHER BUILD_DIR

The launcher finds the library through LOWTIDE_BUILD_DIR; run execs the
command (same pid, exit status and signals pass through), puts lowtide first
in LD_PRELOAD keeping what was there, and passes the settings on."""
import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile

from tools_common import check, clean_env, finish, run, TIMEOUT

launcher, build = sys.argv[1], os.path.abspath(sys.argv[2])
lib = os.path.realpath(os.path.join(build, "src", "liblowtide.so"))
env = clean_env(LOWTIDE_BUILD_DIR=build)
py = "/usr/bin/python3"

rc, out, err = run([launcher, "lib"], env)
check(rc == 0 and out == lib + "\n", "lowtide lib -> %r (rc %d, %s)" % (out, rc, err))

# An explicit build directory without the library is an error naming it,
# not a silent fallback to another build.
with tempfile.TemporaryDirectory(prefix="lowtide-nobuild-") as empty:
    rc, out, err = run([launcher, "lib"], clean_env(LOWTIDE_BUILD_DIR=empty))
    check(rc == 1 and out == "" and os.path.join(empty, "src", "liblowtide.so") in err,
          "lib with an empty LOWTIDE_BUILD_DIR: rc %d, %r" % (rc, err))

# A library whose path has a space or a colon cannot be preloaded (ld.so
# splits LD_PRELOAD there): run refuses, rather than running the command
# without lowtide (before: ld.so's two "cannot be preloaded" lines, exit 0,
# no report); lib still prints the path, with a warning.
with tempfile.TemporaryDirectory(prefix="lowtide-spaced-") as tmp:
    for odd in ("my build", "my:build"):
        spaced = os.path.join(tmp, odd)
        os.makedirs(os.path.join(spaced, "src"))
        with open(lib, "rb") as src, open(os.path.join(spaced, "src", "liblowtide.so"), "wb") as dst:
            dst.write(src.read())
        report = os.path.join(tmp, "r.txt")
        rc, out, err = run([launcher, "run", "--stats-file", report, "--", py, "-c", "pass"],
                           clean_env(LOWTIDE_BUILD_DIR=spaced))
        check(rc == 1 and "LD_PRELOAD cannot hold" in err and "cannot be preloaded" not in err
              and not os.path.exists(report), "run with the library under %r: refused: rc %d %r" % (odd, rc, err))
        rc, out, err = run([launcher, "lib"], clean_env(LOWTIDE_BUILD_DIR=spaced))
        check(rc == 0 and out.strip().endswith(os.path.join(odd, "src", "liblowtide.so"))
              and "LD_PRELOAD cannot hold" in err, "lib under %r: the path and a warning: %r" % (odd, err))

# top's --interval and --count, and doctor's --timeout: a number out of
# range is refused by the parser (rc 2, the option named), not met by
# time.sleep in the middle of top (before: a ValueError traceback after the
# first line), against a process that answers.
target = subprocess.Popen([py, "-c", "import sys, time; b = bytearray(4 << 20); print('up', flush=True); "
                           "time.sleep(60)"], env=dict(env, LD_PRELOAD=lib), stdout=subprocess.PIPE)
try:
    target.stdout.readline()
    for args in (["top", "--interval", "-1", "--count", "2"], ["top", "--interval", "nan", "--count", "2"],
                 ["top", "--count", "0"]):
        rc, out, err = run([launcher] + args + [str(target.pid)], env)
        check(rc == 2 and "Traceback" not in err and args[1] in err, "%s: refused: rc %d %r" % (args, rc, err))
    rc, out, err = run([launcher, "doctor", "--timeout", "-5", "--", "/bin/true"], env)
    check(rc == 2 and "--timeout" in err, "doctor --timeout -5: refused: rc %d %r" % (rc, err[-300:]))
finally:
    target.kill()
    target.wait()

# Where there is no /bin/true (NixOS, a distroless image), the settings are
# still checked, by this Python (before: a FileNotFoundError traceback out
# of `lowtide run`).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(launcher))), "python"))
from lowtide_cli import preload  # noqa: E402
preload.PROBE = "/nonexistent/true"
try:
    said = preload.check_settings(lib, {"LOWTIDE_CUTOFF": "lots"})
    check(len(said) == 1 and "LOWTIDE_CUTOFF='lots'" in said[0], "no /bin/true: the warning still found: %r" % said)
    check(preload.check_settings(lib, {"LOWTIDE_CUTOFF": "1M"}) == [], "no /bin/true: a good value passes")
except OSError as e:
    check(False, "no /bin/true: %r" % e)

# exec: the command has the launcher's pid; preload order and settings.
other = os.path.realpath(os.path.join("/lib", sysconfig.get_config_var("MULTIARCH"), "libm.so.6"))
probe = ("import json, os\n"
         "maps = open('/proc/self/maps').read()\n"
         "print(json.dumps({'pid': os.getpid(), 'preload': os.environ.get('LD_PRELOAD'),"
         " 'mapped': %r in maps,"
         " 'env': {k: v for k, v in os.environ.items() if k.startswith('LOWTIDE_')}}))" % lib)
with tempfile.TemporaryDirectory(prefix="lowtide-run-") as tmp:
    p = subprocess.Popen([launcher, "run", "--cutoff", "512K", "--stats", "json",
                          "--stats-file", os.path.join(tmp, "r.%p.json"), "--", py, "-c", probe],
                         env=dict(env, LD_PRELOAD=other, LOWTIDE_OWNER_PID="1", LOWTIDE_CACHE="0"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=TIMEOUT)
    check(p.returncode == 0, "run rc %d: %s" % (p.returncode, err.decode()))
    got = json.loads(out)
    check(got["pid"] == p.pid, "exec: command pid %d == launcher pid %d" % (got["pid"], p.pid))
    check(got["preload"] == lib + ":" + other, "LD_PRELOAD lowtide first, old kept: %r" % got["preload"])
    check(got["mapped"], "liblowtide.so mapped in the command")
    check(got["env"].get("LOWTIDE_CUTOFF") == "512K" and got["env"].get("LOWTIDE_STATS") == "json"
          and got["env"].get("LOWTIDE_CACHE") == "0" and got["env"].get("LOWTIDE_OWNER_PID") == str(p.pid),
          "settings passed, others kept, inherited owner marker dropped: %r" % got["env"])
    # The launcher's own variable is not the command's (doctor dropped it
    # already; run passed it on).
    check("LOWTIDE_BUILD_DIR" not in got["env"], "the launcher's LOWTIDE_BUILD_DIR dropped: %r" % got["env"])
    report = os.path.join(tmp, "r.%d.json" % p.pid)
    check(os.path.exists(report), "report %s written" % report)
    if os.path.exists(report):
        with open(report) as f:
            r = json.load(f)
        check(r["pid"] == p.pid and r["cutoff"] == 512 * 1024, "report pid and cutoff 512K: %r" % r["cutoff"])

    # --stats-file alone: the format follows the file name. An inherited
    # owner marker would make the command a child that writes no report to
    # a name without %p; run drops it, so the command owns its report.
    rc, out, err = run([launcher, "run", "--stats-file", os.path.join(tmp, "t.txt"), "--", py, "-c", "pass"],
                       dict(env, LOWTIDE_OWNER_PID="1"))
    with open(os.path.join(tmp, "t.txt")) as f:
        check(rc == 0 and f.read().startswith("==== lowtide "), "--stats-file t.txt -> text report")

# Exit status and death by signal pass through.
rc, out, err = run([launcher, "run", "--", py, "-c", "import sys; sys.exit(7)"], env)
check(rc == 7, "exit status 7 passes through: %d" % rc)
rc, out, err = run([launcher, "run", "--", py, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], env)
check(rc == -signal.SIGTERM, "SIGTERM passes through: %d" % rc)

# Mistakes are reported, not run.
rc, out, err = run([launcher, "run", "--cutoff", "12X", "--", py, "-c", "pass"], env)
check(rc == 2 and "--cutoff" in err and "not a size" in err, "bad --cutoff: rc %d %r" % (rc, err))
# The range comes from the library's own table: 1K is a size, but below the minimum.
rc, out, err = run([launcher, "run", "--cutoff", "1K", "--", py, "-c", "pass"], env)
check(rc == 2 and "--cutoff" in err and "below the minimum" in err and "valid: 4 KiB to 1 TiB" in err,
      "--cutoff below the range: rc %d %r" % (rc, err))
# Refused, not run: the library's "using the default 128KiB" would say the
# command ran with the default.
check("using the default" not in err and "the command was not run" in err,
      "a refused --cutoff says the command was not run: %r" % err)
rc, out, err = run([launcher, "run", "--", "/nonexistent/prog"], env)
check(rc == 127 and "cannot run /nonexistent/prog" in err, "missing command: rc %d %r" % (rc, err))
rc, out, err = run([launcher, "run", py], env)
check(rc == 2 and "needs `--` before the command" in err, "no --: rc %d %r" % (rc, err))
rc, out, err = run([launcher, "--help"], env)
check(rc == 0 and all(s in out for s in ("run", "lib", "compare", "report")), "--help lists subcommands")

finish()
