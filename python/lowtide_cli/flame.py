"""Flame graphs of large-block call sites, from lowtide JSON reports written
with LOWTIDE_SITES (docs/report.md, "Flame graphs").

Each site in a report's `sites.top` is one stack (its frames, innermost
first, reversed here to root first) weighing either its bytes at the
process's peak (`at_peak_bytes`, the default) or the bytes it allocated
(`bytes`). The sites a report did not list (beyond LOWTIDE_SITES) weigh in as
one frame, NOT_SHOWN, so the graph adds up to the report's total. Stacks of
several reports (processes) with the same frame names add up.

Two outputs: the collapsed-stack text that flamegraph.pl, speedscope and
inferno read (`frame;frame;frame bytes`, one line per stack), and a
self-contained SVG (no script, no external reference): one rectangle per
node of the stack tree, root at the bottom, each as wide as its bytes, with
a <title> a browser shows on hover."""
import hashlib
import os
import re
import sys
from xml.sax.saxutils import escape

from . import outfile
from .units import human

NOT_SHOWN = "[sites not listed in the report]"
TABLE_FULL = "[stacks seen after the site table filled up]"
ROOT = "all"
OF = {"peak": ("at_peak_bytes", "large bytes live at the process's peak"),
      "total": ("bytes", "large bytes allocated")}


def frame_name(f):
    """A frame's name in the graph: its function, else module+offset.
    Semicolons separate frames in the collapsed format and line breaks
    separate stacks: neither may appear inside a name."""
    fn = f.get("function")
    name = fn if fn else "%s+%#x" % (os.path.basename(f.get("module") or "?"), f.get("offset") or 0)
    return name.replace(";", ":").replace("\n", " ").replace("\r", " ")


def stacks(reports, of="peak"):
    """{stack (tuple of names, root first): bytes} over the reports' sites;
    stacks that weigh nothing are left out."""
    key, _ = OF[of]
    out = {}
    for r in reports:
        sites = r.get("sites") or {}
        if not sites.get("enabled"):
            continue
        for site in sites.get("top", []):
            frames = site.get("frames") or []
            st = tuple(frame_name(f) for f in reversed(frames)) if frames else (TABLE_FULL,)
            out[st] = out.get(st, 0) + int(site.get(key, 0))
        rest = int((sites.get("not_shown") or {}).get(key, 0))
        if rest:
            out[(NOT_SHOWN,)] = out.get((NOT_SHOWN,), 0) + rest
    return {st: v for st, v in out.items() if v > 0}


def collapsed(st):
    """The collapsed-stack text: one `a;b;c bytes` line per stack, sorted."""
    return "".join("%s %d\n" % (";".join(s), v) for s, v in sorted(st.items()))


class Node:
    __slots__ = ("name", "bytes", "children")

    def __init__(self, name):
        self.name, self.bytes, self.children = name, 0, {}


def tree(st):
    root = Node(ROOT)
    for s, v in st.items():
        root.bytes += v
        node = root
        for name in s:
            node = node.children.setdefault(name, Node(name))
            node.bytes += v
    return root


# Characters XML 1.0 does not allow at all, escaped or not (C0 controls
# but tab, newline and carriage return; lone surrogates; U+FFFE, U+FFFF):
# a command line or a file name with one made the SVG a document no
# browser or XML parser opens.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml(s):
    """s as XML character data."""
    return escape(_NOT_XML.sub("?", s))


def _color(name):
    """A warm colour from the name, stable across runs (flame graph custom)."""
    h = hashlib.md5(name.encode("utf-8", "replace")).digest()
    return "rgb(%d,%d,%d)" % (205 + h[0] % 50, 80 + h[1] % 130, 30 + h[2] % 40)


def svg(st, title, width=1200, row=17):
    """The flame graph as an SVG document (a str). Each node's rectangle is
    width * node bytes / total bytes wide."""
    root = tree(st)
    total = root.bytes
    depth = 0
    todo = [(root, 0)]
    while todo:
        n, d = todo.pop()
        depth = max(depth, d)
        todo += [(c, d + 1) for c in n.children.values()]
    pad, top = 10, 44
    height = top + (depth + 1) * row + pad
    inner = width - 2 * pad
    out = ['<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n',
           '<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" '
           'viewBox="0 0 %d %d" font-family="Verdana, sans-serif" font-size="12" '
           'style="background-color:#f8f8f0">\n' % (width, height, width, height),
           '<text x="%d" y="22" font-size="16" text-anchor="middle">%s</text>\n' % (width // 2, _xml(title)),
           '<text x="%d" y="38" font-size="11" text-anchor="middle" fill="#555">%s</text>\n'
           % (width // 2, _xml("%s in all; hover over a frame for its bytes" % human(total)))]

    def emit(n, x, d):
        w = inner * n.bytes / total if total else 0.0
        y = height - pad - (d + 1) * row
        label = "%s: %s (%d bytes, %.2f%%)" % (n.name, human(n.bytes), n.bytes,
                                               100.0 * n.bytes / total if total else 0.0)
        out.append('<g><title>%s</title><rect class="frame" x="%.4f" y="%d" width="%.4f" height="%d" '
                   'fill="%s" stroke="#f8f8f0" stroke-width="0.5" data-bytes="%d" data-depth="%d"/>'
                   % (_xml(label), x, y, w, row - 1, _color(n.name), n.bytes, d))
        chars = int((w - 6) / 7)
        if chars >= 3:
            text = n.name if len(n.name) <= chars else n.name[:chars - 2] + ".."
            out.append('<text x="%.2f" y="%d" font-size="11" pointer-events="none">%s</text>'
                       % (x + 3, y + row - 5, _xml(text)))
        out.append("</g>\n")
        cx = x
        for name in sorted(n.children):
            c = n.children[name]
            emit(c, cx, d + 1)
            cx += inner * c.bytes / total if total else 0.0

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, depth + 100))
    try:
        emit(root, float(pad), 0)
    finally:
        sys.setrecursionlimit(limit)
    out.append("</svg>\n")
    return "".join(out)


def title_of(reports, of):
    _, what = OF[of]
    cmds = sorted({(r.get("command") or "?").split("\n")[0][:60] for r in reports})
    who = cmds[0] if len(cmds) == 1 else "%d processes" % len(reports)
    return "lowtide: %s, by call site (%s)" % (what, who)


def write(path, text):
    """text to path, a name the user gave: outfile.write_path's rules (a
    link there is not written through; /dev/stdout or a FIFO is written,
    not replaced). A lone surrogate (a report's "\\udc80") is written as
    its escape rather than ending the CLI in a UnicodeEncodeError."""
    outfile.write_path(path, text.encode("utf-8", "backslashreplace"))
