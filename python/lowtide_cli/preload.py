"""The environment a command runs in under lowtide."""
import os
import re

# lowtide's own size grammar (docs/configuration.md): digits, an optional
# binary K/M/G/T, then optionally B or iB. Checked here so a typo fails at
# once instead of as a warning from every process of the command.
SIZE_RE = re.compile(r"\s*\d+\s*([KMGT](i?B)?|B)?\s*", re.IGNORECASE)


def valid_size(text):
    return SIZE_RE.fullmatch(text) is not None


def prepend_preload(lib, current):
    """LD_PRELOAD with lib first and every other entry of current kept
    (ld.so splits the list on spaces and colons)."""
    entries = [e for e in re.split(r"[ :]+", current or "") if e]
    same = os.path.realpath(lib)
    rest = [e for e in entries if os.path.realpath(e) != same]
    return ":".join([lib] + rest)


def lowtide_env(lib, base, cutoff=None, stats=None, stats_file=None):
    """A copy of base with lowtide preloaded and the given settings.
    Settings not given are left as base has them."""
    env = dict(base)
    env["LD_PRELOAD"] = prepend_preload(lib, env.get("LD_PRELOAD"))
    # The command started here owns its report, even when this launcher was
    # itself started from a process under lowtide (whose marker it inherits).
    env.pop("LOWTIDE_OWNER_PID", None)
    if cutoff is not None:
        env["LOWTIDE_CUTOFF"] = cutoff
    if stats_file is not None:
        env["LOWTIDE_STATS_FILE"] = stats_file
        if stats is None:
            stats = "json" if stats_file.lower().endswith(".json") else "text"
    if stats is not None:
        env["LOWTIDE_STATS"] = stats
    return env
