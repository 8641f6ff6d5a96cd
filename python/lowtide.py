"""lowtide from inside a Python process.

The functions reach lowtide's C API (include/lowtide/lowtide.h) through the
process's own symbols (ctypes.CDLL(None)): nothing is linked, so this module
imports anywhere, and tells you when the process is not running under
lowtide instead of failing obscurely.

    import lowtide
    if lowtide.active():
        print(lowtide.version(), lowtide.stats()["large_live"])
        lowtide.release()
        lowtide.report("/tmp/now.%p.json")
"""
import ctypes
import os

__all__ = ["NotActive", "active", "version", "stats", "release", "report", "STATS_FIELDS"]

# struct lowtide_stats after its leading size_t `size` as libraries without
# lowtide_stats_fields() lay it out. Frozen: newer libraries name their
# fields themselves (include/lowtide/lowtide_stats.def is the one list), and
# fields are only ever appended, so this is a prefix of every newer layout.
_FIELDS_BEFORE_NAMES = (
    "malloc_calls", "calloc_calls", "realloc_calls", "aligned_calls", "free_calls",
    "small_requested", "small_out", "small_freed",
    "large_requested", "large_out", "large_freed",
    "large_maps", "large_unmaps", "large_in_place", "large_remaps", "large_remap_bytes",
    "large_copies", "large_copy_bytes", "large_returned_bytes",
    "cross_up", "cross_down", "large_fallback",
    "large_live", "large_peak_live",
    "threads",
    "large_reused", "large_cached_frees", "large_cached_bytes",
)


def _library_fields():
    """The field names the loaded lowtide reports (lowtide_stats_fields()),
    or None when lowtide is absent or older than that function."""
    try:
        fn = ctypes.CDLL(None).lowtide_stats_fields
    except AttributeError:
        return None
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    return tuple(fn().decode().split(","))


def _struct(fields):
    """A ctypes struct lowtide_stats with these fields after `size` (each a uint64_t)."""
    return type("_Stats", (ctypes.Structure,),
                {"_fields_": [("size", ctypes.c_size_t)] + [(f, ctypes.c_uint64) for f in fields]})


# The fields of struct lowtide_stats after `size`, in order: the loaded
# library's (lowtide is preloaded, so it cannot appear later in the process).
STATS_FIELDS = _library_fields() or _FIELDS_BEFORE_NAMES

_FORMATS = {"configured": 0, "text": 1, "json": 2, "both": 3, "prometheus": 4}


class NotActive(RuntimeError):
    """Raised by every function but active() when lowtide is not loaded."""


_Stats = _struct(STATS_FIELDS)


_lib = None


def _api():
    """The process's lowtide symbols, typed; None when lowtide is absent."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(None, use_errno=True)
        try:
            lib.lowtide_version.restype = ctypes.c_char_p
            lib.lowtide_version.argtypes = []
            lib.lowtide_get_stats.restype = ctypes.c_int
            lib.lowtide_get_stats.argtypes = [ctypes.POINTER(_Stats)]
            lib.lowtide_write_report.restype = ctypes.c_int
            lib.lowtide_write_report.argtypes = [ctypes.c_char_p, ctypes.c_int]
            lib.lowtide_release.restype = ctypes.c_size_t
            lib.lowtide_release.argtypes = []
        except AttributeError:
            # Not cached: lowtide cannot appear later in this process (it
            # must be preloaded), but looking again is cheap and honest.
            return None
        _lib = lib
    return _lib


def _need():
    lib = _api()
    if lib is None:
        raise NotActive("this process is not running under lowtide; start it with "
                        "`lowtide run -- CMD ...` or LD_PRELOAD=$(lowtide lib) CMD ...")
    return lib


def active():
    """True if liblowtide is loaded in this process (preloaded and exporting its API)."""
    return _api() is not None


def version():
    """lowtide's version string, e.g. "0.1.0"."""
    return _need().lowtide_version().decode()


def stats():
    """Process totals as a dict of ints, keys as in STATS_FIELDS
    (the fields of struct lowtide_stats; byte counts are usable sizes)."""
    lib = _need()
    s = _Stats()
    s.size = ctypes.sizeof(_Stats)
    if lib.lowtide_get_stats(ctypes.byref(s)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "lowtide_get_stats failed")
    return {f: getattr(s, f) for f in STATS_FIELDS}


def release():
    """Give back to the OS what can be given back now; returns the bytes by
    which the resident set fell (0 if nothing was held)."""
    return int(_need().lowtide_release())


def report(path=None, format="json"):
    """Write a report now. path: a file name (str, bytes or a path object;
    "%p" = pid, "%%" = "%"),
    "stderr", or None for LOWTIDE_STATS_FILE (stderr when unset).
    format: "text", "json", "both", "prometheus", or "configured" (LOWTIDE_STATS's;
    Prometheus for a name ending in .prom).
    Raises OSError when the file could not be written (lowtide then wrote
    the report to stderr), ValueError for a name with a NUL byte."""
    lib = _need()
    if format not in _FORMATS:
        raise ValueError("format must be one of %s, not %r" % (", ".join(_FORMATS), format))
    # os.fsencode: a str (with the surrogates os.listdir gives a name that
    # is not UTF-8), bytes or a path object, as os.open takes them; str()
    # made b"/tmp/r.json" the name "b'/tmp/r.json'".
    arg = None if path is None else os.fsencode(path)
    if arg is not None and b"\0" in arg:
        # As os.open: C would see the name cut at the NUL and write there.
        raise ValueError("embedded null byte in path %r" % (path,))
    if lib.lowtide_write_report(arg, _FORMATS[format]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "lowtide_write_report failed", path)
