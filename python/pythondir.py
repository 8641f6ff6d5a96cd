"""Where meson install puts lowtide's Python modules for a prefix:

  python3 -I pythondir.py PREFIX MESON_DIR

prints MESON_DIR (meson's python module's answer) when the interpreter
reads modules from it, else the first directory on the interpreter's
sys.path under PREFIX that holds packages (site-packages, dist-packages),
else MESON_DIR (a prefix python3 does not read, e.g. /opt/lowtide: the
launcher finds its modules relative to itself; `import lowtide` needs
PYTHONPATH there). Run with -I so PYTHONPATH and the user's site do not
count."""
import os
import sys

prefix = os.path.normpath(sys.argv[1])
meson_dir = sys.argv[2]


def norm(d):
    return os.path.normpath(d.rstrip("/"))


path = [norm(p) for p in sys.path if p]
if norm(meson_dir) in path:
    print(norm(meson_dir))
else:
    ours = [p for p in path if p.startswith(prefix.rstrip("/") + "/")
            and os.path.basename(p) in ("site-packages", "dist-packages")]
    print(ours[0] if ours else norm(meson_dir))
