#!/usr/bin/python3
"""Cost of first-touch page faults on this machine.

1. mmap 64 MiB anonymous, memset it (touches every 4 KiB page), time it;
   memset it again (no faults) and subtract, so only the fault cost
   (kernel entry + page zeroing + mapping) remains; per 4 KiB page.
2. mmap 66 MiB, align to 2 MiB, madvise(MADV_HUGEPAGE) on a 64 MiB
   2 MiB-aligned region, same measurement, reported per 4 KiB of memory
   (and per 2 MiB huge page); AnonHugePages confirms THP was used.
Median of `--reps` (default 5) trials. Prints one JSON line.
"""
import ctypes
import json
import statistics
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
libc.memset.restype = ctypes.c_void_p

PROT_RW, MAP_PRIV_ANON, MADV_HUGEPAGE = 3, 0x22, 14
MiB = 1 << 20
SIZE = 64 * MiB
HUGE = 2 * MiB
PAGES = SIZE // 4096


def anon_huge_kb():
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return 0


def trial(huge):
    maplen = SIZE + HUGE if huge else SIZE
    base = libc.mmap(None, maplen, PROT_RW, MAP_PRIV_ANON, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap failed")
    addr = (base + HUGE - 1) & ~(HUGE - 1) if huge else base
    if huge and libc.madvise(addr, SIZE, MADV_HUGEPAGE) != 0:
        raise OSError(ctypes.get_errno(), "madvise failed")
    t0 = time.perf_counter()
    libc.memset(addr, 1, SIZE)
    t1 = time.perf_counter()
    libc.memset(addr, 2, SIZE)
    t2 = time.perf_counter()
    thp = anon_huge_kb()
    libc.munmap(base, maplen)
    first, second = t1 - t0, t2 - t1
    return first, second, thp


def main():
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 5
    out = {"region_bytes": SIZE, "reps": reps}
    for huge in (False, True):
        rs = [trial(huge) for _ in range(reps)]
        first = statistics.median(r[0] for r in rs)
        second = statistics.median(r[1] for r in rs)
        fault = max(first - second, 0.0)
        key = "thp" if huge else "4k"
        out[key] = {
            "first_touch_s": round(first, 5),
            "retouch_s": round(second, 5),
            "us_per_4k_first_touch": round(first / PAGES * 1e6, 3),
            "us_per_4k_fault_only": round(fault / PAGES * 1e6, 3),
            "anon_huge_kb_seen": max(r[2] for r in rs),
        }
        if huge:
            out[key]["us_per_2m_fault_only"] = round(fault / (SIZE // HUGE) * 1e6, 1)
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        out["thp_mode"] = f.read().strip()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
