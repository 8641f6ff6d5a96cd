"""Finding liblowtide.so among the launcher's candidate paths."""
import os
import sys


def find_library(candidates, build_hint):
    """The first existing candidate as an absolute, symlink-free path, or
    None after saying on stderr where it looked and what to do."""
    for c in candidates:
        if os.path.isfile(c):
            return os.path.realpath(c)
    print("lowtide: liblowtide.so not found; looked for:", file=sys.stderr)
    for c in candidates:
        print("  " + c, file=sys.stderr)
    print("lowtide: " + build_hint, file=sys.stderr)
    return None
