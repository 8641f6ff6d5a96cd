// tests/programs/jvm_test.py's second program: the JVM's own use of signals
// under lowtide. A hot loop that dereferences null half the time, so the JIT
// compiles an implicit null check (a SIGSEGV the JVM's handler turns into a
// NullPointerException), then a shutdown hook and a sleep until the test
// sends SIGTERM: the JVM's handler (installed over lowtide's) runs the hook
// and exits with status 143, and that exit writes lowtide's report.
public final class JvmSignals {
  static int first(int[] a) {
    return a[0];
  }

  public static void main(String[] args) throws Exception {
    long sum = 0;
    final int[] one = {1};
    for (int i = 0; i < 2_000_000; i++) {
      try {
        sum += first((i & 1) == 0 ? null : one);
      } catch (NullPointerException e) {
        sum += 2;
      }
    }
    Runtime.getRuntime().addShutdownHook(new Thread(() -> System.out.println("shutdown hook ran")));
    System.out.println("ready " + sum);
    System.out.flush();
    Thread.sleep(120_000);
    System.out.println("not stopped");
  }
}
