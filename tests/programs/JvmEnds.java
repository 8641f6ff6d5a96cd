// tests/programs/jvm_test.py's third program: a JVM that ends while four
// threads allocate and free off-heap blocks (Unsafe.allocateMemory and
// freeMemory, 256 B to 4 MiB: both of lowtide's paths), as a service ends
// with its workers busy. "exit": System.exit(7) from main, so the JVM's
// exit (and lowtide's destructor, its report) runs while the others are
// inside malloc and free. "crash": a write through address 0 from Java
// code (Unsafe.putAddress), so the JVM's error handler runs in its SIGSEGV
// handler, mallocs while it writes hs_err_pid*.log, and ends the process by
// _exit(1) (with -XX:-CreateCoredumpOnCrash), which lowtide interposes.
import java.lang.reflect.Field;
import java.util.SplittableRandom;

public final class JvmEnds {
  public static void main(String[] args) throws Exception {
    Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
    f.setAccessible(true);
    final sun.misc.Unsafe u = (sun.misc.Unsafe) f.get(null);
    for (int t = 0; t < 4; t++) {
      final int id = t;
      Thread th = new Thread(() -> {
        SplittableRandom r = new SplittableRandom(id);
        long[] p = new long[32];
        long[] n = new long[32];
        for (;;) {
          int i = r.nextInt(32);
          if (p[i] != 0) {
            if (u.getByte(p[i]) != (byte) i || u.getByte(p[i] + n[i] - 1) != (byte) i) {
              System.out.println("bad block");
              System.exit(3);
            }
            u.freeMemory(p[i]);
          }
          n[i] = 256 + r.nextLong(1L << (8 + r.nextInt(15)));
          p[i] = u.allocateMemory(n[i]);
          u.putByte(p[i], (byte) i);
          u.putByte(p[i] + n[i] - 1, (byte) i);
        }
      }, "ends-" + t);
      th.setDaemon(true);
      th.start();
    }
    Thread.sleep(300);
    System.out.println("ending by " + args[0]);
    System.out.flush();
    if (args[0].equals("exit")) System.exit(7);
    u.putAddress(0, 0);
    System.out.println("not crashed");
  }
}
