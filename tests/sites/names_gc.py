"""A collection must never start inside malloc (names_test.py, case gc).

A bytearray grown by += past the cutoff is a large malloc, captured (every
one, LOWTIDE_SITE_SAMPLE=0) with its Python frames; the growing function's
code has a file name with a lone surrogate (a script under a directory
whose name is not UTF-8), which PyUnicode_AsUTF8 refuses by making a
UnicodeEncodeError. With the collector's threshold at 1 that object started
a collection inside the malloc, and a cycle's finalizer ran there, half-way
through the bytearray's resize. Prints the count of finalizers that ran
inside the += (0 wanted) and of those that ran at all."""
import gc

state = {"in_alloc": False, "inside": 0, "ran": 0}


class Cycle:
    def __del__(self):
        state["ran"] += 1
        if state["in_alloc"]:
            state["inside"] += 1


SRC = ("def grow(b, chunk):\n"
       "    state['in_alloc'] = True\n"
       "    b += chunk\n"
       "    state['in_alloc'] = False\n"
       "    return b\n")
ns = {"state": state}
exec(compile(SRC, "/nonexistent/caf\udce9/grow.py", "exec"), ns)
chunk = b"x" * (200 << 10)
gc.collect()
gc.set_threshold(1)
for _ in range(20):
    c = Cycle()
    c.me = c
    del c  # only the collector frees it
    b = ns["grow"](bytearray(1000), chunk)
gc.set_threshold(700)
gc.collect()
print(state["inside"], state["ran"])
