// OffHeap: issue 14's JVM off-heap shape on a real JVM (bench/offheap.cpp is
// the same shape in C++). N threads each build their share of --mib MiB of
// off-heap buffers of 1-4 MiB (uniform, a fixed seed per thread), written in
// full, hold them until every thread is done, check them, then free their
// own. Two rounds by default: a service handling one batch after another.
//
// How buffers are allocated and freed (--mode):
//   unsafe  sun.misc.Unsafe.allocateMemory / setMemory / freeMemory: the
//           JVM's os::malloc and os::free, i.e. malloc and free of the C
//           library, called at once. What Netty's and Arrow's allocators do
//           with their direct memory (they free without waiting for the GC).
//   direct  ByteBuffer.allocateDirect (malloc, then zeroed), filled with
//           put(); the buffers are dropped and the JVM's Cleaner thread frees
//           them after a GC: frees from another thread, later. The program
//           waits (System.gc, up to 20 s) until the direct pool is back to
//           what it held before the first round.
//
// --spawn K: during each round's build, one more thread starts K processes
// (ProcessBuilder, /bin/true) one after another and waits for each: the
// JVM's vfork/posix_spawn while its threads allocate. --settle S: after the
// 1 s sample, poll VmRSS every 20 ms, up to S seconds, until it is within
// --settle-mib MiB (default 32) of rss_before (tests/programs/jvm_test.py).
//
// Prints one JSON line (the fields of bench/workloads/_common.py's finish):
// wall_s (the rounds), rss_before, peak_rss, rss_after_free, rss_after_200ms,
// rss_after_300ms, rss_after_decay (1 s), and blocks and bytes (per round),
// bad (bytes read back that were not what was written: must be 0), spawned
// (processes that exited 0), settled_s and settled_rss (-1 and the last
// reading if RSS did not come back in time; 0 without --settle).
//
// usage: java -Xmx64m -XX:MaxDirectMemorySize=8g -cp DIR OffHeap
//            [--threads N] [--mib M] [--rounds R] [--mode unsafe|direct]
//            [--spawn K] [--settle S] [--settle-mib M] [--scale X]
//   scale (BENCH_SCALE too) multiplies --mib: 1024 MiB a round at scale 1
import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.SplittableRandom;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicLong;

public final class OffHeap {
  static final long MIN = 1L << 20, MAX = 4L << 20, PAGE = 4096;

  // VmRSS and VmHWM of this process, bytes.
  static long[] status() throws Exception {
    long[] out = new long[2];
    for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
      int i = line.startsWith("VmRSS:") ? 0 : line.startsWith("VmHWM:") ? 1 : -1;
      if (i >= 0) out[i] = Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
    }
    return out;
  }

  // What bench/workloads/_common.py's allocator() says: "lowtide" when it is
  // mapped in this process, else the preloaded library's name, else "glibc".
  static String allocator() throws Exception {
    for (String line : Files.readAllLines(Paths.get("/proc/self/maps")))
      if (line.endsWith("/liblowtide.so") || line.contains("/liblowtide.so.")) return "lowtide";
    String pre = System.getenv("LD_PRELOAD");
    if (pre == null || pre.isEmpty()) return "glibc";
    return Paths.get(pre.split("[ :]")[0]).getFileName().toString();
  }

  static String arg(String[] args, String name, String dflt) {
    for (int i = 0; i + 1 < args.length; i++) if (args[i].equals(name)) return args[i + 1];
    return dflt;
  }

  static BufferPoolMXBean directPool() {
    for (BufferPoolMXBean b : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class))
      if (b.getName().equals("direct")) return b;
    throw new IllegalStateException("no direct buffer pool");
  }

  static void sleepUntil(long t0, double s) throws InterruptedException {
    long left = t0 + (long) (s * 1e9) - System.nanoTime();
    if (left > 0) Thread.sleep(left / 1000000, (int) (left % 1000000));
  }

  // Allocation and the check are methods of their own so that no frame of the
  // worker keeps a buffer in a dead local slot (the interpreter does), which
  // would keep it from the Cleaner in direct mode.
  static long build(sun.misc.Unsafe U, String mode, SplittableRandom rng, long share, byte v,
                    ArrayList<long[]> raw, ArrayList<ByteBuffer> bufs) {
    long built = 0;
    while (built < share) {
      long n = MIN + rng.nextLong(MAX - MIN + 1);
      if (mode.equals("unsafe")) {
        long p = U.allocateMemory(n);
        U.setMemory(p, n, v);
        raw.add(new long[] {p, n});
      } else {
        ByteBuffer b = ByteBuffer.allocateDirect((int) n);
        for (int i = 0; i < n; i += PAGE) b.put(i, v);
        b.put((int) n - 1, v);
        bufs.add(b);
      }
      built += n;
    }
    return built;
  }

  // Bytes read back (one per 4 KiB page and the last) that are not v.
  static long check(sun.misc.Unsafe U, ArrayList<long[]> raw, ArrayList<ByteBuffer> bufs, byte v) {
    long wrong = 0;
    for (long[] b : raw) {
      for (long i = 0; i < b[1]; i += PAGE) if (U.getByte(b[0] + i) != v) wrong++;
      if (U.getByte(b[0] + b[1] - 1) != v) wrong++;
    }
    for (int k = 0; k < bufs.size(); k++) {
      ByteBuffer b = bufs.get(k);
      for (int i = 0; i < b.capacity(); i += PAGE) if (b.get(i) != v) wrong++;
      if (b.get(b.capacity() - 1) != v) wrong++;
    }
    return wrong;
  }

  public static void main(String[] args) throws Exception {
    final int threads = Integer.parseInt(arg(args, "--threads", "4"));
    final int rounds = Integer.parseInt(arg(args, "--rounds", "2"));
    final String mode = arg(args, "--mode", "unsafe");
    final String envScale = System.getenv("BENCH_SCALE");
    final double scale = Double.parseDouble(arg(args, "--scale", envScale != null ? envScale : "1"));
    final double mib = Double.parseDouble(arg(args, "--mib", "1024")) * scale;
    final int spawn = Integer.parseInt(arg(args, "--spawn", "0"));
    final double settle = Double.parseDouble(arg(args, "--settle", "0"));
    final long settleSlack = Long.parseLong(arg(args, "--settle-mib", "32")) << 20;
    if (threads < 1 || rounds < 1 || mib <= 0 || spawn < 0 || settle < 0
        || !(mode.equals("unsafe") || mode.equals("direct"))) {
      System.err.println("usage: OffHeap [--threads N] [--mib M] [--rounds R] [--mode unsafe|direct] "
          + "[--spawn K] [--settle S] [--settle-mib M] [--scale X]");
      System.exit(2);
    }
    final long share = (long) (mib * 1048576.0 / threads);
    Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
    f.setAccessible(true);
    final sun.misc.Unsafe U = (sun.misc.Unsafe) f.get(null);
    final BufferPoolMXBean pool = directPool();
    final CyclicBarrier sync = new CyclicBarrier(threads);
    final AtomicLong blocks = new AtomicLong(), bytes = new AtomicLong(), bad = new AtomicLong();
    final AtomicLong spawned = new AtomicLong();
    final Throwable[] failed = new Throwable[1];

    System.gc();
    final long rssBefore = status()[0];
    // Direct buffers the JDK keeps for itself (reading /proc/self/status
    // leaves a temporary one cached for the thread): a round's are freed once
    // the pool is back to this count.
    final long poolBase = pool.getCount();
    final long t0 = System.nanoTime();
    Thread[] ts = new Thread[threads];
    for (int t = 0; t < threads; t++) {
      final int id = t;
      ts[t] = new Thread(() -> {
        try {
          SplittableRandom rng = new SplittableRandom(0x0ffea900L + id);
          for (int r = 0; r < rounds; r++) {
            final byte v = (byte) (r + 1);
            ArrayList<long[]> raw = new ArrayList<>();      // {address, size}
            ArrayList<ByteBuffer> bufs = new ArrayList<>();
            Thread spawner = null;
            if (id == 0 && spawn > 0) {
              spawner = new Thread(() -> {
                try {
                  for (int k = 0; k < spawn; k++) {
                    Process p = new ProcessBuilder("/bin/true").start();
                    if (p.waitFor() == 0) spawned.incrementAndGet();
                  }
                } catch (Exception e) {
                  throw new RuntimeException(e);
                }
              }, "offheap-spawner");
              spawner.start();
            }
            long built = build(U, mode, rng, share, v, raw, bufs);
            if (spawner != null) spawner.join();
            sync.await();  // every buffer of the round is live
            bad.addAndGet(check(U, raw, bufs, v));
            if (id == 0) {
              blocks.set(0);
              bytes.set(0);
            }
            sync.await();
            blocks.addAndGet(raw.size() + bufs.size());
            bytes.addAndGet(built);
            for (long[] b : raw) U.freeMemory(b[0]);
            raw.clear();
            bufs.clear();  // the Cleaner frees them after a GC
            sync.await();  // every buffer of the round is freed (or dropped)
            if (mode.equals("direct") && id == 0) {
              long give_up = System.nanoTime() + 20_000_000_000L;
              while (pool.getCount() > poolBase && System.nanoTime() < give_up) {
                System.gc();
                Thread.sleep(5);
              }
              if (pool.getCount() > poolBase) throw new IllegalStateException("direct buffers not freed after 20 s");
            }
            sync.await();
          }
        } catch (Throwable e) {
          synchronized (failed) { if (failed[0] == null) failed[0] = e; }
          sync.reset();
        }
      }, "offheap-" + t);
      ts[t].start();
    }
    for (Thread t : ts) t.join();
    if (failed[0] != null) {
      failed[0].printStackTrace();
      System.exit(1);
    }
    final double wall = (System.nanoTime() - t0) / 1e9;
    final long tf = System.nanoTime();
    final long rssFree = status()[0];
    sleepUntil(tf, 0.2);
    final long rss200 = status()[0];
    sleepUntil(tf, 0.3);
    final long rss300 = status()[0];
    sleepUntil(tf, 1.0);
    final long[] last = status();
    double settledS = 0;
    long settledRss = last[0];
    if (settle > 0) {
      settledS = -1;
      while (true) {
        settledRss = status()[0];
        double now = (System.nanoTime() - tf) / 1e9;
        if (settledRss <= rssBefore + settleSlack) {
          settledS = now;
          break;
        }
        if (now > 1.0 + settle) break;
        Thread.sleep(20);
      }
    }
    System.out.printf(
        "{\"workload\": \"jvm-offheap\", \"allocator\": \"%s\", \"mode\": \"%s\", \"threads\": %d, \"rounds\": %d, \"mib\": %.0f, "
            + "\"blocks\": %d, \"bytes\": %d, \"bad\": %d, \"spawned\": %d, \"wall_s\": %.4f, \"rss_before\": %d, \"peak_rss\": %d, "
            + "\"rss_after_free\": %d, \"rss_after_200ms\": %d, \"rss_after_300ms\": %d, \"rss_after_decay\": %d, "
            + "\"settled_s\": %.3f, \"settled_rss\": %d}%n",
        allocator(), mode, threads, rounds, mib, blocks.get(), bytes.get(), bad.get(), spawned.get(), wall, rssBefore, last[1],
        rssFree, rss200, rss300, last[0], settledS, settledRss);
  }
}
