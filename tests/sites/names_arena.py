"""A capture inside Python's allocator (names_test.py, case arena).

pymalloc grows its table of arenas with PyMem_RawRealloc, doubling it when
every arena is full; with LOWTIDE_CUTOFF=4KiB the growth from 64 to 128
arenas (3 KiB to 6 KiB) is a large realloc, captured (LOWTIDE_SITE_SAMPLE=0)
with its Python frames. fill()'s file name has a lone surrogate, so a
capture that asks PyUnicode_AsUTF8 for it makes a UnicodeEncodeError,
allocated by pymalloc in the very size classes fill() is filling: that
allocation found no arena either and grew the same table again from inside
the first realloc, which then copied and freed a block already freed (a
SIGSEGV at the latest when the interpreter freed its objects at exit).
200,000 exceptions kept are about 80 arenas. Prints "ok N"."""
import sys

SRC = ("def fill(keep, n):\n"
       "    s = 'caf\\udce9'\n"
       "    for _ in range(n):\n"
       "        try:\n"
       "            s.encode()\n"
       "        except UnicodeEncodeError as e:\n"
       "            keep.append(e)\n")
ns = {}
exec(compile(SRC, "/nonexistent/caf\udce9/fill.py", "exec"), ns)
keep = []
ns["fill"](keep, 200000)
print("ok", len(keep))
sys.stdout.flush()
