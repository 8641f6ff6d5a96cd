"""A small Python workload for the report tests: 4 threads each build 25
large buffers of 2 MiB (100 in all, ~200 MB handed out, at most ~50 MB live
at once) and a few thousand small objects. Prints, as one JSON line, what it
built; check_report.py compares the report against it."""
import json
import threading

LARGE = 2 << 20
PER_THREAD = 25
THREADS = 4


def work(i, out):
    kept = []
    built = 0
    for j in range(PER_THREAD):
        b = bytearray(LARGE)  # one large block each
        b[0] = j & 0xFF
        kept.append(b)
        built += 1
        if len(kept) > 6:
            kept.pop(0)
    small = [str(k) * 3 for k in range(5000)]
    out[i] = (built, len(small))


def main():
    out = [None] * THREADS
    threads = [threading.Thread(target=work, args=(i, out), name=f"work{i}") for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        if t.is_alive():
            raise SystemExit("workload thread did not finish")
    print(json.dumps({"large_buffers": sum(o[0] for o in out), "large_size": LARGE, "threads": THREADS}), flush=True)


if __name__ == "__main__":
    main()
