# Python frames whose names are not ASCII (names_test.py, case unicode):
# Latin-1, BMP and astral characters in a function's name and a file's, a
# file name longer than the 160 bytes kept (its end is kept) and a
# qualified name longer than the 96 (its head). Prints the names as the
# report should show them, one a line: "file", then "name" for each (the
# qualified name from 3.11 on, co_name before).
import sys

FILE = "/nonexistent/" + "d\u00e9j\u00e0/" * 30 + "\u0436\U0001F600.py"
FUNC = "caf\u00e9_\u0436_\U00010400"
METH = "m\u00e9thode" * 20
SRC = ("def " + FUNC + "(n):\n"
       "    return bytearray(n)\n"
       "class K\u00e9:\n"
       "    def " + METH + "(self, n):\n"
       "        return bytearray(n)\n")
ns = {}
exec(compile(SRC, FILE, "exec"), ns)
ns[FUNC](1 << 20)
getattr(ns["K\u00e9"](), METH)(1 << 20)
print(FILE)
print(FUNC)
print(("K\u00e9." if sys.version_info >= (3, 11) else "") + METH)
