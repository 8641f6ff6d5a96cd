"""struct lowtide_stats, seen four ways that must agree field for field:

  stats_layout_test.py LAYOUT_EXE LOWTIDE_STATS_DEF PYTHON_DIR

1. the header, compiled (LAYOUT_EXE, tests/stats/stats_layout.c: each
   field's offset and size, as a C program gets them from lowtide.h, the
   header that is installed);
2. the library: lowtide_stats_fields() of the preloaded liblowtide.so;
3. the table, include/lowtide/lowtide_stats.def, read as text;
4. python/lowtide.py: its ctypes struct, names, offsets and sizes, and its
   fallback for libraries older than lowtide_stats_fields() (a prefix of
   the layout, at the same offsets), which it uses without lowtide.
Runs under LD_PRELOAD=liblowtide.so (meson's preload_env)."""
import ctypes
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from lttest import check, clean_env, finish, run  # noqa: E402

layout_exe, def_path, python_dir = sys.argv[1:4]
sys.path.insert(0, python_dir)
import lowtide  # noqa: E402

# 1. the header
rc, out, err = run([layout_exe], clean_env(), 60, show_failure=True)
check(rc == 0, f"{layout_exe}: exit status {rc}")
lines = [line.split() for line in out.splitlines()]
c_sizeof = int(lines[0][1]) if lines and lines[0][0] == "sizeof" else -1
c_fields = [(name, int(off), int(size)) for name, off, size in lines[1:]]
c_names = [name for name, _, _ in c_fields]
check(len(c_fields) >= 28, f"the header has the 0.1.0 fields at least: {len(c_fields)}")

# 2. the library
lib = ctypes.CDLL(None)
if check(hasattr(lib, "lowtide_stats_fields"), "lowtide_stats_fields exported (is liblowtide.so preloaded?)"):
    lib.lowtide_stats_fields.restype = ctypes.c_char_p
    lib_names = lib.lowtide_stats_fields().decode().split(",")
    check(lib_names == c_names, f"lowtide_stats_fields() names the header's fields in order:\n  {lib_names}\n  {c_names}")

# 3. the table
with open(def_path) as f:
    def_names = re.findall(r"^LOWTIDE_STAT\((\w+),", f.read(), re.M)
check(def_names == c_names, f"lowtide_stats_fields.def rows are the header's fields:\n  {def_names}\n  {c_names}")

# 4. python/lowtide.py
def layout(struct):
    return [(name, getattr(struct, name).offset, getattr(struct, name).size) for name, _ in struct._fields_]


check(lowtide.active(), "lowtide.active() under LD_PRELOAD")
check(list(lowtide.STATS_FIELDS) == c_names, f"lowtide.STATS_FIELDS is the header's list:\n  {list(lowtide.STATS_FIELDS)}")
py = layout(lowtide._Stats)
want = [("size", 0, ctypes.sizeof(ctypes.c_size_t))] + c_fields
for i in range(max(len(py), len(want))):
    got, exp = py[i] if i < len(py) else None, want[i] if i < len(want) else None
    check(got == exp, f"python struct field {i}: {got} (name, offset, size), header: {exp}")
check(ctypes.sizeof(lowtide._Stats) == c_sizeof, f"sizeof: python {ctypes.sizeof(lowtide._Stats)}, C {c_sizeof}")
s = lowtide.stats()
check(list(s) == c_names and s["threads"] >= 1 and s["malloc_calls"] >= 1, "lowtide.stats() reads every field")

# the fallback for an older library: the 0.1.0 fields, a prefix at the same offsets
old = layout(lowtide._struct(lowtide._FIELDS_BEFORE_NAMES))
check(old == want[:len(old)], f"the fallback layout is a prefix of the header's:\n  {old}\n  {want[:len(old)]}")
# ... and what lowtide.py uses without lowtide (no lowtide_stats_fields to ask)
rc, out, err = run([sys.executable, "-c", "import json, lowtide; "
                    "print(json.dumps([lowtide.active(), list(lowtide.STATS_FIELDS)]))"],
                   clean_env(PYTHONPATH=python_dir), 60, show_failure=True)
got = json.loads(out) if rc == 0 else None
check(got == [False, list(lowtide._FIELDS_BEFORE_NAMES)], f"without lowtide: the fallback fields: {got}")
finish("stats_layout")
