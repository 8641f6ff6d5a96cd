"""The environment a command runs in under lowtide."""
import os
import re
import subprocess
import sys

# The launcher's own variable (where the source tree's build is), not the
# library's: no command lowtide starts gets it (run, compare, doctor).
LAUNCHER_ONLY = ("LOWTIDE_BUILD_DIR",)
# Set by a process under lowtide that reports, inherited by everything it
# starts: a process that finds another pid there takes itself for that
# one's child and writes no report of its own without %p in the name
# (docs/report.md). The processes the CLI starts own their reports: run
# from a shell under `lowtide run --stats`, doctor's probe otherwise wrote
# none and doctor said the library did not work.
NOT_INHERITED = LAUNCHER_ONLY + ("LOWTIDE_OWNER_PID",)

# /bin/true (or any small program) started under the library only to let
# it read the settings: the library's own parser and ranges (src/options.cpp)
# are the only definition of what a setting accepts.
PROBE = "/bin/true"


def probe_program():
    """PROBE, or this Python where there is no /bin/true (NixOS, a
    distroless image): the probe then ran nothing but a FileNotFoundError
    traceback out of `lowtide run`."""
    return PROBE if os.path.exists(PROBE) else sys.executable


def check_settings(lib, settings):
    """The library's warnings (one line each, naming the variable, the
    valid range and the default it would use) for the LOWTIDE_* settings
    given, checked by the library itself: [] when every value is accepted.
    A typo fails at once instead of as a warning from every process of the
    command."""
    if not settings:
        return []
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOWTIDE_") and k != "LD_PRELOAD"}
    env.update(settings)
    env["LD_PRELOAD"] = lib
    prog = probe_program()
    argv = [prog] if prog == PROBE else [prog, "-c", "pass"]
    p = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=30)
    lines = p.stderr.decode(errors="replace").splitlines()
    return [ln for ln in lines if ln.startswith("lowtide: warning: LOWTIDE_")]


def unpreloadable(lib):
    """Why lib cannot be an entry of LD_PRELOAD, or None. ld.so splits the
    list at every space and colon, with no way to quote one: a library in
    "/home/me/my tools/..." would be two entries that do not exist, ld.so
    would say so and go on, and the command would run without lowtide."""
    bad = [c for c in (" ", ":") if c in lib]
    if not bad:
        return None
    return ("the library's path %r has %s, which LD_PRELOAD cannot hold (ld.so splits its list there): "
            "a command would run without lowtide. Build or install lowtide where its path has none, or "
            "preload it by a link from such a path (LD_PRELOAD=/opt/lowtide/liblowtide.so CMD)" % (lib, " and ".join({" ": "a space", ":": "a colon"}[c] for c in bad)))


def prepend_preload(lib, current):
    """LD_PRELOAD with lib first and every other entry of current kept
    (ld.so splits the list on spaces and colons)."""
    entries = [e for e in re.split(r"[ :]+", current or "") if e]
    same = os.path.realpath(lib)
    rest = [e for e in entries if os.path.realpath(e) != same]
    return ":".join([lib] + rest)


def lowtide_env(lib, base, cutoff=None, stats=None, stats_file=None):
    """A copy of base with lowtide preloaded and the given settings, without
    NOT_INHERITED: the command started here owns its report, even when this
    launcher was itself started from a process under lowtide (whose marker
    it inherits), and does not get the launcher's LOWTIDE_BUILD_DIR.
    Settings not given are left as base has them."""
    env = {k: v for k, v in base.items() if k not in NOT_INHERITED}
    env["LD_PRELOAD"] = prepend_preload(lib, env.get("LD_PRELOAD"))
    if cutoff is not None:
        env["LOWTIDE_CUTOFF"] = cutoff
    if stats_file is not None:
        env["LOWTIDE_STATS_FILE"] = stats_file
        if stats is None:
            stats = "json" if stats_file.lower().endswith(".json") else "text"
    if stats is not None:
        env["LOWTIDE_STATS"] = stats
    return env
