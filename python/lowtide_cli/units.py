"""Byte counts for people: binary units, one decimal, as lowtide's report."""


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
