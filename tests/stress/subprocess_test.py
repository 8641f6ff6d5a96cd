#!/usr/bin/python3
"""subprocess and multiprocessing under /usr/bin/python3 with the shim preloaded.

- 50 x subprocess.run (Python 3.11 uses vfork in _posixsubprocess), output
  and return codes checked, while a thread allocates large bytes objects;
- a run that fails to exec (nonexistent binary) -> FileNotFoundError, and the
  interpreter keeps working;
- a run with preexec_fn (forces fork instead of vfork);
- multiprocessing with the 'fork' start method: Pool(2) over large bytes.
Everything is bounded: per-call timeouts plus a global SIGALRM.
"""

import hashlib
import multiprocessing
import os
import signal
import subprocess
import sys
import threading


def fail(msg):
    sys.stderr.write("FAIL: %s\n" % msg)
    sys.stderr.flush()
    os._exit(1)


def on_alarm(signum, frame):
    sys.stderr.write("FAIL: watchdog expired (hang?) in subprocess_test.py\n")
    sys.stderr.flush()
    os._exit(3)


def check(cond, msg):
    if not cond:
        fail(msg)


MiB = 1024 * 1024


def big_digest(i):
    # runs in the forked pool workers: large allocations on both sides
    data = bytes([(i * 7 + k) & 0xFF for k in range(256)]) * (4 * MiB // 256 + i)
    buf = bytearray(data)
    buf[-1] = i & 0xFF
    more = [bytes(3 * MiB) for _ in range(3)]
    return i, len(buf), hashlib.sha256(bytes(buf)).hexdigest(), sum(len(m) for m in more)


def expected_digest(i):
    data = bytes([(i * 7 + k) & 0xFF for k in range(256)]) * (4 * MiB // 256 + i)
    buf = bytearray(data)
    buf[-1] = i & 0xFF
    return i, len(buf), hashlib.sha256(bytes(buf)).hexdigest(), 9 * MiB


def main():
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(150)
    print("python", sys.version.split()[0], "LD_PRELOAD=%s" % os.environ.get("LD_PRELOAD", "(unset)"))

    stop = threading.Event()
    churn_errors = []

    def churn():
        n = 0
        while not stop.is_set():
            try:
                blobs = [bytearray(2 * MiB + n % 4096), bytes(200), b"x" * (MiB + 1)]
                blobs[0][-1] = 7
                if blobs[0][-1] != 7 or len(blobs[2]) != MiB + 1:
                    churn_errors.append("corrupt blob")
                n += 1
            except Exception as e:  # pragma: no cover - reported below
                churn_errors.append(repr(e))
                return

    t = threading.Thread(target=churn, daemon=True)
    t.start()

    # 50 x subprocess.run with captured output
    for i in range(50):
        if i % 5 == 0:
            r = subprocess.run(["/bin/sh", "-c", "echo out-$0; echo err-$0 >&2; exit $(($0 % 7))", str(i)],
                               capture_output=True, text=True, timeout=20)
            check(r.stdout == "out-%d\n" % i, "run %d: stdout %r" % (i, r.stdout))
            check(r.stderr == "err-%d\n" % i, "run %d: stderr %r" % (i, r.stderr))
            check(r.returncode == i % 7, "run %d: returncode %d" % (i, r.returncode))
        elif i % 5 == 1:
            payload = os.urandom(256 * 1024)
            r = subprocess.run(["/bin/cat"], input=payload, capture_output=True, timeout=20)
            check(r.returncode == 0 and r.stdout == payload, "run %d: cat round trip failed" % i)
        elif i % 5 == 2:
            r = subprocess.run(["/bin/echo", "hello", str(i)], stdout=subprocess.PIPE, timeout=20,
                               env={"PATH": "/usr/bin:/bin", "LOWTIDE_X": "1", **{k: v for k, v in os.environ.items()
                                                                                   if k.startswith(("LD_", "LOWTIDE"))}})
            check(r.stdout == b"hello %d\n" % i, "run %d: echo gave %r" % (i, r.stdout))
        elif i % 5 == 3:
            r = subprocess.run(["/bin/false"], timeout=20)
            check(r.returncode == 1, "run %d: /bin/false returncode %d" % (i, r.returncode))
        else:
            # the child is python itself, also running under the preload
            r = subprocess.run([sys.executable, "-c", "import sys; b = bytearray(5 * 1024 * 1024); print(len(b))"],
                               capture_output=True, text=True, timeout=30)
            check(r.returncode == 0 and r.stdout.strip() == str(5 * MiB),
                  "run %d: python child rc=%d out=%r err=%r" % (i, r.returncode, r.stdout, r.stderr))

    # exec failure -> FileNotFoundError raised in the parent
    try:
        subprocess.run(["/nonexistent/lowtide-no-such-binary", "x"], timeout=20)
        fail("running a nonexistent binary did not raise")
    except FileNotFoundError:
        pass
    try:
        subprocess.run(["lowtide-no-such-binary-on-path"], timeout=20)
        fail("running a nonexistent PATH binary did not raise")
    except FileNotFoundError:
        pass
    # and the interpreter still works afterwards
    r = subprocess.run(["/bin/echo", "after"], capture_output=True, timeout=20)
    check(r.stdout == b"after\n", "subprocess broken after exec failure: %r" % r.stdout)

    # preexec_fn disables vfork: plain fork of a multithreaded interpreter
    r = subprocess.run(["/bin/echo", "preexec"], capture_output=True, timeout=20, preexec_fn=lambda: None)
    check(r.stdout == b"preexec\n", "preexec_fn run: %r" % r.stdout)

    stop.set()
    t.join(timeout=20)
    check(not t.is_alive(), "churn thread did not stop")
    check(not churn_errors, "churn thread errors: %r" % churn_errors)

    # multiprocessing, fork start method
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        async_result = pool.map_async(big_digest, range(8))
        try:
            results = async_result.get(timeout=90)
        except multiprocessing.TimeoutError:
            fail("multiprocessing pool (fork) did not finish within 90 s")
    want = [expected_digest(i) for i in range(8)]
    check(results == want, "multiprocessing results differ: %r vs %r" % (results[:1], want[:1]))

    # a plain forked Process that returns data through a Queue
    q = ctx.Queue()

    def produce(q):
        q.put(bytes(range(256)) * (8 * 1024))

    p = ctx.Process(target=produce, args=(q,))
    p.start()
    data = q.get(timeout=30)
    p.join(timeout=30)
    check(p.exitcode == 0, "forked Process exit code %r" % p.exitcode)
    check(data == bytes(range(256)) * (8 * 1024), "data from forked Process corrupted")

    print("PASS subprocess_test")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
