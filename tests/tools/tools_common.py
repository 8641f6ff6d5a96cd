"""What the tools tests share: running the launcher with a clean lowtide
environment, bounded by a timeout, and collecting failed checks."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import lttest  # noqa: E402
from lttest import check, clean_env, failures, finish  # noqa: E402,F401


TIMEOUT = 120


def run(argv, env, timeout=TIMEOUT, **kw):
    return lttest.run(argv, env, timeout, **kw)
