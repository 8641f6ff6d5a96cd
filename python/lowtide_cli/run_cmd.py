"""`lowtide run`: exec a command with lowtide preloaded."""
import os
import re
import sys

from . import preload


def main(lib, command, cutoff=None, stats=None, stats_file=None):
    given = {"LOWTIDE_CUTOFF": cutoff, "LOWTIDE_STATS_FILE": stats_file}
    bad = preload.check_settings(lib, {k: v for k, v in given.items() if v is not None})
    if bad:
        flags = {"LOWTIDE_CUTOFF": "--cutoff", "LOWTIDE_STATS_FILE": "--stats-file"}
        for line in bad:
            text = line[len("lowtide: warning: "):]
            var = text.split("=", 1)[0]
            # The library's line ends "; using the default X", which is what
            # a process given that value does; the launcher refuses it and
            # runs nothing, so that ending would say the opposite.
            text = re.sub(r"; using the default .*$", "; the command was not run", text)
            print("lowtide run: %s: %s" % (flags.get(var, var), text), file=sys.stderr)
        return 2
    env = preload.lowtide_env(lib, os.environ, cutoff=cutoff, stats=stats, stats_file=stats_file)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        # The shell's convention: 127 not found, 126 found but not runnable.
        print("lowtide run: cannot run %s: %s" % (command[0], e.strerror), file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126
