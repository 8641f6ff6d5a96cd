#!/usr/bin/python3
"""A real JVM (Debian's OpenJDK 17) under lowtide: the off-heap shape lowtide
is for (bench/jvm/OffHeap.java), with and without lowtide.

Four threads build 2 rounds of 256 MiB of 1-4 MiB off-heap buffers, written
in full and read back, then freed: once with Unsafe.allocateMemory and
freeMemory (what Netty's and Arrow's allocators do), once with
ByteBuffer.allocateDirect, freed by the JVM's Cleaner thread after a GC
(frees from another thread, later). In each round another thread starts 4
processes (ProcessBuilder: the JVM's posix_spawn through jspawnhelper) while
the others allocate. Both runs must give the same blocks and bytes and read
back every byte they wrote; under lowtide every process reports, the JVM's
report shows the buffers on the large path, all freed, and the JVM's RSS
comes back within 48 MiB of what it was before the rounds (the program polls
for up to 10 s; plain glibc keeps ~190 MiB here, printed, not checked).

Then the JVM's own signals (tests/programs/JvmSignals.java): a JIT-compiled
implicit null check (SIGSEGV, handled by the JVM) two million times, and
SIGTERM, which the JVM's handler turns into its shutdown hooks and exit
status 143; under lowtide that exit writes the report.

Last, the JVM ending while four threads allocate and free off-heap blocks
(tests/programs/JvmEnds.java): System.exit(7), and a crash (a write
through address 0), where the JVM's error handler mallocs inside its SIGSEGV
handler to write hs_err_pid*.log and then leaves by _exit(1). Each must end
within 60 s with the status it has without lowtide, the crash's hs_err file
complete (its last line "END."), and under lowtide the JVM's report written.

Usage: jvm_test.py <liblowtide.so> <source root>"""
import glob
import json
import os
import shutil
import subprocess
import sys
import signal
import tempfile

from real_common import Runner, check, finish

SETTLE_MIB = 48


def compile_offheap(src_root, out_dir):
    javac = shutil.which("javac")
    check(javac is not None and shutil.which("java") is not None,
          "java/javac not found: scripts/lib/deps.sh installs openjdk-17-jdk-headless")
    if javac is None:
        return False
    srcs = [os.path.join(src_root, "bench", "jvm", "OffHeap.java"),
            os.path.join(src_root, "tests", "programs", "JvmSignals.java"),
            os.path.join(src_root, "tests", "programs", "JvmEnds.java")]
    p = subprocess.run([javac, "-nowarn", "-d", out_dir] + srcs,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    return check(p.returncode == 0, f"javac: exit {p.returncode}: {p.stdout.decode()[-2000:]}")


def run_signals(runner, classes):
    """JvmSignals until it says ready, then SIGTERM: (exit status, stdout)."""
    what = "signals, " + ("under lowtide" if runner.under else "plain")
    p = subprocess.Popen(["java", "-Xmx64m", "-cp", classes, "JvmSignals"], env=runner.env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ready = p.stdout.readline().decode(errors="replace").strip()
        check(ready == "ready 3000000", f"{what}: said {ready!r}, not 'ready 3000000'")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    except BaseException:
        p.kill()
        p.wait()
        raise
    out = out.decode(errors="replace")
    print(f"{what}: exit {p.returncode}, then {out.strip()!r}", flush=True)
    check(p.returncode == 128 + signal.SIGTERM and out.strip() == "shutdown hook ran",
          f"{what}: exit {p.returncode} (want 143, the JVM's status for SIGTERM) and {out!r}: "
          f"{err.decode(errors='replace')[-2000:]}")
    return p.returncode, out


def run_ends(runner, classes, how):
    """JvmEnds ended by `how` (exit, crash) in a directory of its own:
    (exit status, whether an hs_err file was written whole)."""
    what = f"ends by {how}, " + ("under lowtide" if runner.under else "plain")
    work = tempfile.mkdtemp(prefix="lowtide-jvm-ends-")
    try:
        argv = ["java", "-Xmx64m", "-XX:-CreateCoredumpOnCrash", "-XX:ErrorFile=" + os.path.join(work, "hs_err_%p.log"),
                "-cp", classes, "JvmEnds", how]
        try:
            rc, so, se = runner.run(argv, timeout=60, cwd=work)
        except subprocess.TimeoutExpired:
            check(False, f"{what}: still running after 60 s")
            return None, None
        logs = glob.glob(os.path.join(work, "hs_err_*.log"))
        whole = False
        if logs:
            with open(logs[0], errors="replace") as f:
                text = f.read()
            whole = "SIGSEGV" in text and text.rstrip().endswith("END.")
        print(f"{what}: exit {rc}, {len(logs)} hs_err file(s){' (whole)' if whole else ''}", flush=True)
        said = so.decode(errors="replace").splitlines()
        # (the crash's JVM goes on with its own lines: where hs_err went)
        check(said[:1] == [f"ending by {how}"], f"{what}: said {so[:300]!r}: {se.decode(errors='replace')[-1000:]}")
        return rc, whole
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_offheap(runner, classes, mode):
    argv = ["java", "-Xmx64m", "-XX:MaxDirectMemorySize=4g", "-cp", classes, "OffHeap", "--mode", mode,
            "--threads", "4", "--rounds", "2", "--mib", "256", "--spawn", "4",
            "--settle", "10", "--settle-mib", str(SETTLE_MIB)]
    rc, so, se = runner.run(argv, timeout=300)
    what = f"{mode}, {'under lowtide' if runner.under else 'plain'}"
    lines = so.decode(errors="replace").strip().splitlines()
    if not check(rc == 0 and lines and lines[-1].startswith("{"),
                 f"{what}: exit {rc}: {se.decode(errors='replace')[-2000:]}"):
        return None
    d = json.loads(lines[-1])
    print(f"{what}: {d['blocks']} blocks, {d['bytes'] >> 20} MiB a round, {d['wall_s']:.2f} s, RSS before "
          f"{d['rss_before'] >> 20} MiB, right after the free {d['rss_after_free'] >> 20}, 0.2 s after "
          f"{d['rss_after_200ms'] >> 20}, 1 s after {d['rss_after_decay'] >> 20}, settled "
          f"{'in %.2f s' % d['settled_s'] if d['settled_s'] >= 0 else 'never'} at {d['settled_rss'] >> 20}", flush=True)
    check(d["bad"] == 0, f"{what}: {d['bad']} bytes read back were not what was written")
    check(d["spawned"] == 8, f"{what}: {d['spawned']} of 8 processes started and exited 0")
    return d


def jvm_report(runner):
    """The JVM's own report: the process whose large path mapped the most."""
    best = None
    for path in glob.glob(os.path.join(runner.reports, "r.*.json")):
        with open(path) as f:
            r = json.load(f)
        if best is None or r["large"]["maps"] > best["large"]["maps"]:
            best = r
    return best, len(glob.glob(os.path.join(runner.reports, "r.*.json")))


def main():
    lib, src_root = sys.argv[1], sys.argv[2]
    classes = tempfile.mkdtemp(prefix="lowtide-jvm-classes-")
    try:
        if not compile_offheap(src_root, classes):
            return
        for mode in ("unsafe", "direct"):
            plain = run_offheap(Runner(lib, False), classes, mode)
            lt_runner = Runner(lib, True)
            lt = run_offheap(lt_runner, classes, mode)
            if plain is None or lt is None:
                continue
            check((plain["blocks"], plain["bytes"]) == (lt["blocks"], lt["bytes"]),
                  f"{mode}: different buffers under lowtide: {plain['blocks']} blocks of {plain['bytes']} bytes "
                  f"plain, {lt['blocks']} of {lt['bytes']} under lowtide")
            check(lt["settled_s"] >= 0,
                  f"{mode}: under lowtide the JVM's RSS stayed at {lt['settled_rss'] >> 20} MiB, more than "
                  f"{SETTLE_MIB} MiB over the {lt['rss_before'] >> 20} MiB before the rounds, 11 s after the free")
            rep, nrep = jvm_report(lt_runner)
            # The JVM, and per started process jspawnhelper and /bin/true
            # (or /bin/true alone where the JVM spawns it directly).
            check(nrep >= 1 + 8, f"{mode}: {nrep} processes reported under lowtide (the JVM and its 8 children "
                                 f"at least)")
            if rep is None:
                continue
            large = rep["totals"]["large"]
            print(f"{mode}: the JVM's report: {rep['large']['maps']} large blocks mapped, {large['freed'] >> 20} MiB "
                  f"freed, {large['live'] >> 20} MiB live at exit; {nrep} reports", flush=True)
            check(rep["large"]["maps"] + rep["large"]["reused"] >= 2 * lt["blocks"],
                  f"{mode}: the JVM's report shows {rep['large']['maps']} large blocks mapped and "
                  f"{rep['large']['reused']} reused, fewer than the {2 * lt['blocks']} buffers")
            check(large["freed"] >= 2 * lt["bytes"],
                  f"{mode}: the JVM's report shows {large['freed']} large bytes freed, less than the "
                  f"{2 * lt['bytes']} of the buffers")
            check(large["live"] < lt["bytes"] // 4,
                  f"{mode}: the JVM's report shows {large['live']} large bytes live at exit")
        plain = run_signals(Runner(lib, False), classes)
        lt_runner = Runner(lib, True)
        lt = run_signals(lt_runner, classes)
        check(plain == lt, f"signals: {plain} plain, {lt} under lowtide")
        rep, nrep = jvm_report(lt_runner)
        check(nrep == 1 and rep is not None and rep["totals"]["calls"]["malloc"] > 0,
              f"signals: {nrep} reports under lowtide after SIGTERM (want the JVM's one)")
        for how, want in (("exit", (7, False)), ("crash", (1, True))):
            plain = run_ends(Runner(lib, False), classes, how)
            lt_runner = Runner(lib, True)
            lt = run_ends(lt_runner, classes, how)
            check(plain == want, f"ends by {how}: plain gave (exit, hs_err whole) {plain}, not {want}: the "
                                 f"JVM behaves otherwise than this test expects")
            check(lt == plain, f"ends by {how}: (exit, hs_err whole) {lt} under lowtide, {plain} plain")
            rep, nrep = jvm_report(lt_runner)
            check(nrep == 1 and rep is not None and not rep["truncated"] and rep["totals"]["calls"]["free"] > 0,
                  f"ends by {how}: {nrep} reports under lowtide (want the JVM's one, whole)")
    finally:
        shutil.rmtree(classes, ignore_errors=True)


if __name__ == "__main__":
    main()
    finish("jvm")
