# Large blocks allocated by threads that do not hold the GIL: ctypes releases
# it around a foreign call, so libc's malloc runs GIL-free while the main
# thread keeps allocating large buffers with it held.
import ctypes
import threading

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]


def worker():
    for _ in range(200):
        p = libc.malloc(4 << 20)
        libc.free(p)


threads = [threading.Thread(target=worker) for _ in range(3)]
for t in threads:
    t.start()
held = []
for i in range(200):
    held.append(bytearray(1 << 20))
    if len(held) > 8:
        held.pop(0)
for t in threads:
    t.join()
