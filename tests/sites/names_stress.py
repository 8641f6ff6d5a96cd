# Large blocks from awkward places for a Python-frame capture: generators,
# a class body, a finalizer run by the collector, an exception being
# handled (it must survive the capture), threads taking turns with the GIL,
# threads without it (ctypes). Exits 0 and prints "ok" if nothing broke.
import ctypes
import gc
import sys
import threading

BIG = 1 << 18


def gen(n):
    for i in range(n):
        yield bytes(BIG + i)


class Body:
    table = [bytearray(BIG) for _ in range(3)]


class Finalized:
    def __init__(self):
        self.me = self  # a cycle: freed by the collector, which runs __del__

    def __del__(self):
        bytearray(BIG)


def handled():
    try:
        raise ValueError("kept")
    except ValueError as e:
        b = bytearray(BIG)
        assert str(e) == "kept" and sys.exc_info()[1] is e, "the exception being handled survives"
        return len(b)


def worker(k):
    total = 0
    for _ in range(50):
        total += sum(len(x) for x in gen(3))
        total += handled()
        Finalized()
        if k == 0:
            gc.collect()
    return total


libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]


def nogil():
    for _ in range(100):
        libc.free(libc.malloc(BIG * 4))


ts = [threading.Thread(target=worker, args=(k,)) for k in range(3)] + [threading.Thread(target=nogil)]
for t in ts:
    t.start()
worker(9)
for t in ts:
    t.join()
assert len(Body.table) == 3
print("ok")
