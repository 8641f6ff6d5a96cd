"""`lowtide run`: exec a command with lowtide preloaded."""
import os
import sys

from . import preload


def main(lib, command, cutoff=None, stats=None, stats_file=None):
    if cutoff is not None and not preload.valid_size(cutoff):
        print("lowtide run: --cutoff %r is not a size (e.g. 512K, 1MiB, 1048576)" % cutoff, file=sys.stderr)
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
