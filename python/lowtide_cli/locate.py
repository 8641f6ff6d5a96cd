"""Finding liblowtide.so among the launcher's candidate paths, and the
version of what was found."""
import json
import os
import sys


def find_library(candidates, build_hint, quiet=False):
    """The first existing candidate as an absolute, symlink-free path, or
    None after saying on stderr (unless quiet) where it looked and what to do."""
    for c in candidates:
        if os.path.isfile(c):
            return os.path.realpath(c)
    if quiet:
        return None
    print("lowtide: liblowtide.so not found; looked for:", file=sys.stderr)
    for c in candidates:
        print("  " + c, file=sys.stderr)
    print("lowtide: " + build_hint, file=sys.stderr)
    return None


def packaged_library():
    """Where a pip install puts the library: inside this package
    (meson.build's lowtide_libdir with -Dpython_package=true)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "liblowtide.so")


def packaged_version():
    """The version pip recorded for this package (meson's project version,
    pyproject.toml's dynamic version), or None outside a pip install."""
    if not os.path.isfile(packaged_library()):
        return None
    try:
        from importlib import metadata
        return metadata.version("lowtide")
    except Exception:  # no metadata: not installed by pip
        return None


def build_version(lib):
    """The project version of the meson build directory lib was built in
    (BUILD/src/liblowtide.so: BUILD/meson-info), or None."""
    if lib is None:
        return None
    info = os.path.join(os.path.dirname(os.path.dirname(lib)), "meson-info", "intro-projectinfo.json")
    try:
        with open(info) as f:
            return json.load(f).get("version")
    except (OSError, ValueError):
        return None
