"""Byte counts for people: binary units, one decimal, as lowtide's report;
and strings from a process made safe to print on a terminal."""
import re


def human(n):
    v = float(n)
    sign = "-" if v < 0 else ""
    v = abs(v)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if v < 1024 or unit == "TiB":
            return "%s%.0f B" % (sign, v) if unit == "B" else "%s%.1f %s" % (sign, v, unit)
        v /= 1024


def mib(n):
    return "%.1f" % (n / (1024 * 1024))


# C0 controls, DEL, C1 controls (U+0080-U+009F: some terminals take U+009B
# as CSI) and lone surrogates (a JSON "\\udc80": not encodable to stdout).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(s):
    """s with every control character replaced by "?", as ps(1) shows a
    command line: for the strings a process chooses itself (its command
    line, thread names, symbol and file names) before they reach a terminal,
    where an escape sequence would be obeyed (retitle the window, rewrite
    the screen, answer back). Not for JSON output: json.dumps escapes them."""
    return _UNPRINTABLE.sub("?", str(s))
