#!/usr/bin/python3
"""Node.js (Debian's nodejs: V8, libuv's thread pool) under lowtide, with
and without it.

- Buffers and ArrayBuffers of 1 KiB to 64 MiB (V8's backing stores come
  from calloc and malloc), written, checked and dropped to the GC; worker
  threads that pass ArrayBuffers to the main thread and back (allocated on
  one thread, freed on another), a third of them terminated early; gzip,
  scrypt and file reads in the libuv pool; child processes (execSync,
  spawn, fork) while the workers allocate. Both runs must count the same,
  and read back every byte they wrote; under lowtide every process
  reports, node's report shows the buffers on the large path, and node's
  RSS comes back within SETTLE_MIB of what it was before ~400 MiB of
  buffers were made and dropped (polled for up to 5 s; plain glibc's, 0.5 s
  after the drop, is printed, not checked).
- How node ends: SIGTERM and SIGINT (node's own handlers, installed with
  SA_RESETHAND: they reset the terminal and raise the signal again), an
  uncaught exception, process.exit while the pool is busy, and a V8 heap
  out of memory (abort): the same status with and without lowtide, none
  hangs, and a report from each but the abort.

Usage: node_test.py <liblowtide.so>"""
import glob
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

from real_common import Runner, check, finish

SETTLE_MIB = 48
SETTLE_S = 5

CHILD = "process.send(Buffer.alloc(3 << 20, 1).length, () => process.exit(0));\n"

CHURN = r"""
const { Worker } = require('worker_threads');
const cp = require('child_process'), zlib = require('zlib'), crypto = require('crypto'), fs = require('fs');
const MiB = 1 << 20;
const rss = () => process.memoryUsage().rss;
let seed = 1, bad = 0, bytes = 0, blocks = 0;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function churn() {
  const sizes = [1024, 64 << 10, 130 << 10, 200 << 10, MiB, 3 * MiB, 16 * MiB, 64 * MiB];
  const keep = [];
  for (let i = 0; i < 400; i++) {
    let k = rnd(sizes.length);
    if (k === sizes.length - 1 && i % 20 !== 0) k = 4;
    const size = sizes[k], how = rnd(3), v = i & 0xff;
    const b = how === 0 ? Buffer.alloc(size) : how === 1 ? Buffer.allocUnsafe(size) : Buffer.allocUnsafeSlow(size);
    if (how === 0 && (b[0] | b[size >> 1] | b[size - 1]) !== 0) bad++;
    b.fill(v);
    blocks++; bytes += size;
    keep.push([b, v]);
    if (keep.length > 24) {
      const [o, w] = keep.splice(rnd(keep.length), 1)[0];
      for (let j = 0; j < o.length; j += 4093) if (o[j] !== w) { bad++; break; }
    }
  }
  for (let s = 1; s <= 64; s *= 4) {
    const u = new Uint8Array(new ArrayBuffer(s * MiB));
    for (let j = 0; j < u.length; j += 4096) if (u[j] !== 0) { bad++; break; }
    u.fill(7); blocks++; bytes += s * MiB;
  }
}

const WORKER = `
const { parentPort, workerData } = require('worker_threads');
let back = 0;
parentPort.on('message', (m) => {
  const u = new Uint8Array(m.ab);
  if (u[0] !== 3 || u[u.length - 1] !== 3) process.exit(9);
  if (++back === 6) process.exit(0);
});
for (let k = 0; k < 6; k++) {
  const size = [64 << 10, 200 << 10, 1 << 20, 3 << 20, 16 << 20, 130 << 10][k];
  const ab = new ArrayBuffer(size);
  new Uint8Array(ab).fill((workerData + k) & 0xff);
  parentPort.postMessage({ ab, v: (workerData + k) & 0xff }, [ab]);
}
setInterval(() => {}, 1000);`;

function worker(i, stats) {
  return new Promise((resolve) => {
    const w = new Worker(WORKER, { eval: true, workerData: i });
    w.on('message', (m) => {
      const u = new Uint8Array(m.ab);
      if (u[0] !== m.v || u[u.length - 1] !== m.v) bad++;
      if (i % 3 !== 2) stats.got++;  // the ones terminated early send a varying number
      const back = new ArrayBuffer(u.length);
      new Uint8Array(back).fill(3);
      w.postMessage({ ab: back }, [back]);
    });
    w.on('error', () => { bad++; });
    w.on('exit', (code) => { if (code !== 0 && code !== 1) bad++; resolve(); });
    if (i % 3 === 2) setTimeout(() => w.terminate(), 1);
  });
}

function pool(file) {
  const text = Buffer.from('lowtide under node '.repeat(100000));
  const jobs = [];
  for (let i = 0; i < 2; i++) {
    jobs.push(new Promise((r) => zlib.gzip(text, (e, z) => zlib.gunzip(z, (e2, u) => { if (e || e2 || !u.equals(text)) bad++; r(); }))));
    jobs.push(new Promise((r) => crypto.scrypt('pw', 's' + i, 64, { N: 16384, r: 8, p: 1 }, (e) => { if (e) bad++; r(); })));
    jobs.push(new Promise((r) => fs.readFile(file, (e, d) => { if (e || d.length !== 24 * MiB || d[d.length - 1] !== 0x5a) bad++; r(); })));
  }
  return Promise.all(jobs);
}

function children(stats) {
  const jobs = [];
  for (let i = 0; i < 2; i++) {
    if (cp.execSync('echo hi', { timeout: 20000 }).toString() === 'hi\n') stats.children++;
    jobs.push(new Promise((r) => cp.spawn('/bin/true').on('exit', (c) => { if (c === 0) stats.children++; r(); })));
  }
  jobs.push(new Promise((r) => {
    const c = cp.fork(process.argv[3]);
    c.on('message', (m) => { if (m === 3 << 20) stats.children++; });
    c.on('exit', (code) => { if (code === 0) stats.children++; r(); });
  }));
  return Promise.all(jobs);
}

(async () => {
  const file = process.argv[2];
  churn();
  const stats = { got: 0, children: 0 };
  const ws = [];
  for (let i = 0; i < 6; i++) ws.push(worker(i, stats));
  await Promise.all([pool(file), children(stats), ...ws]);
  global.gc(); global.gc();
  await sleep(700);  // past the reuse cache's decay of what the churn freed
  const before = rss();
  let big = [];
  for (let i = 0; i < 100; i++) { const b = Buffer.allocUnsafe(4 * MiB); b.fill(1); big.push(b); }
  const peak = rss();
  big = null;
  global.gc(); global.gc();
  const t0 = Date.now();
  let settled = -1, now = rss();
  while (Date.now() - t0 < +process.argv[4] * 1000) {
    now = rss();
    if (now <= before + SETTLE) { settled = (Date.now() - t0) / 1000; break; }
    await sleep(50);
  }
  if (settled < 0) { await sleep(500); now = rss(); }
  console.log(JSON.stringify({ bad, blocks, bytes, got: stats.got, children: stats.children, before, peak, settled, rss_after: now }));
})();
""".replace("SETTLE", str(SETTLE_MIB << 20))

# Each of these says "ready" once its pool and threads are busy.
ENDINGS = {
    "SIGTERM": ("signal", "SIGTERM"),
    "SIGINT": ("signal", "SIGINT"),
    "uncaught exception": ("throw", None),
    "process.exit(3) while busy": ("exit", None),
    "heap out of memory": ("oom", None),
}

ENDING = r"""
const mode = process.argv[2];
const { Worker } = require('worker_threads');
const zlib = require('zlib'), crypto = require('crypto');
for (let i = 0; i < 4; i++) {
  crypto.scrypt('x', 's' + i, 64, { N: 16384, r: 8 }, () => {});
  zlib.gzip(Buffer.alloc(4 << 20, i), () => {});
}
new Worker('const k = []; setInterval(() => { k.push(Buffer.alloc(1 << 20, 1)); if (k.length > 64) k.splice(0, 32); }, 1);', { eval: true });
const junk = [];
setInterval(() => { junk.push(Buffer.alloc(300 << 10)); if (junk.length > 100) junk.splice(0, 50); }, 1);
console.log('ready');
if (mode === 'throw') setTimeout(() => { throw new Error('uncaught'); }, 50);
if (mode === 'exit') setTimeout(() => process.exit(3), 50);
if (mode === 'oom') { const a = []; setTimeout(() => { for (;;) a.push(new Array(1 << 20).fill(a.length)); }, 50); }
setTimeout(() => process.exit(0), 20000);
"""


def run_churn(runner, js, data, child):
    what = "churn, " + ("under lowtide" if runner.under else "plain")
    # Only lowtide's RSS is checked: the other runs' is measured 0.5 s after the drop.
    settle_s = SETTLE_S if runner.under else 0
    rc, so, se = runner.run(["node", "--expose-gc", js, data, child, str(settle_s)], timeout=120)
    lines = so.decode(errors="replace").strip().splitlines()
    if not check(rc == 0 and lines and lines[-1].startswith("{"),
                 f"{what}: exit {rc}: {se.decode(errors='replace')[-2000:]}"):
        return None
    d = json.loads(lines[-1])
    settled = ("in %.2f s" % d["settled"] if d["settled"] >= 0 else "never" if runner.under else "not checked")
    print(f"{what}: {d['blocks']} buffers, {d['bytes'] >> 20} MiB, {d['got']} ArrayBuffers from workers, "
          f"{d['children']} children; RSS before {d['before'] >> 20} MiB, peak {d['peak'] >> 20}, after the drop "
          f"{d['rss_after'] >> 20}, settled {settled}", flush=True)
    check(d["bad"] == 0, f"{what}: {d['bad']} bad reads (a byte not as written, a worker's failure)")
    return d


def run_ending(runner, js, name):
    mode, sig = ENDINGS[name]
    argv = ["node"] + (["--max-old-space-size=16"] if mode == "oom" else []) + [js, mode]
    p = subprocess.Popen(argv, env=runner.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ready = p.stdout.readline().decode(errors="replace").strip()
        if sig is not None:
            p.send_signal(getattr(signal, sig))
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        check(False, f"{name}: node still running after 60 s ({'under lowtide' if runner.under else 'plain'})")
        return None
    reports = len(glob.glob(os.path.join(runner.reports, "r.*.json")))
    for path in glob.glob(os.path.join(runner.reports, "r.*.json")):
        os.unlink(path)
    err = err.decode(errors="replace")
    return ready, p.returncode, "heap out of memory" in err, reports


def main():
    lib = sys.argv[1]
    # The V8 out-of-memory ending aborts: no core file of a GiB-sized
    # process into the build directory where core dumps are enabled.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if not check(shutil.which("node") is not None, "node not found: scripts/lib/deps.sh installs nodejs"):
        finish("node")
    work = tempfile.mkdtemp(prefix="lowtide-node-")
    try:
        churn_js, child_js, ending_js, data = (os.path.join(work, n)
                                               for n in ("churn.js", "child.js", "ending.js", "data.bin"))
        with open(churn_js, "w") as f:
            f.write(CHURN)
        with open(child_js, "w") as f:
            f.write(CHILD)
        with open(ending_js, "w") as f:
            f.write(ENDING)
        with open(data, "wb") as f:
            f.write(b"\x5a" * (24 << 20))

        plain = run_churn(Runner(lib, False), churn_js, data, child_js)
        lt_runner = Runner(lib, True)
        lt = run_churn(lt_runner, churn_js, data, child_js)
        if plain is not None and lt is not None:
            same = ("blocks", "bytes", "got", "children")
            check(all(plain[k] == lt[k] for k in same),
                  f"churn: different counts under lowtide: {[plain[k] for k in same]} plain, {[lt[k] for k in same]}")
            check(lt["settled"] >= 0, f"churn: under lowtide node's RSS stayed at {lt['rss_after'] >> 20} MiB, "
                                      f"more than {SETTLE_MIB} MiB over the {lt['before'] >> 20} MiB before, "
                                      f"{SETTLE_S} s after ~400 MiB of buffers were dropped")
            reps = []
            for path in glob.glob(os.path.join(lt_runner.reports, "r.*.json")):
                with open(path) as f:
                    reps.append(json.load(f))
            # node, sh and echo per execSync, true per spawn, the forked node
            check(len(reps) >= 1 + 2 + 2 + 1, f"churn: {len(reps)} processes reported under lowtide")
            rep = max(reps, key=lambda r: r["large"]["maps"] + r["large"]["reused"], default=None)
            if rep is not None:
                large = rep["totals"]["large"]
                print(f"churn: node's report: {rep['large']['maps']} large blocks mapped, {rep['large']['reused']} "
                      f"reused, {large['freed'] >> 20} MiB freed, {large['live'] >> 20} MiB live at exit; peak RSS "
                      f"{rep['process']['peak_rss'] >> 20} MiB; {len(reps)} reports", flush=True)
                check(large["freed"] >= 400 << 20, f"churn: node's report shows {large['freed']} large bytes freed")
                check(rep["process"]["peak_rss"] >= lt["peak"],
                      f"churn: the report's peak RSS {rep['process']['peak_rss']} is below the {lt['peak']} node saw")

        for name in ENDINGS:
            plain = run_ending(Runner(lib, False), ending_js, name)
            lt = run_ending(Runner(lib, True), ending_js, name)
            print(f"{name}: plain {plain}, under lowtide {lt}", flush=True)
            if plain is None or lt is None:
                continue
            check(plain[0] == lt[0] == "ready", f"{name}: node said {plain[0]!r} plain, {lt[0]!r} under lowtide")
            check(plain[1:3] == lt[1:3], f"{name}: exit status {plain[1]} plain, {lt[1]} under lowtide")
            # abort() writes no report (report.md); every other ending does
            want = 0 if ENDINGS[name][0] == "oom" else 1
            check(lt[3] == want, f"{name}: {lt[3]} reports under lowtide, want {want}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("node")


if __name__ == "__main__":
    main()
