// A fork never leaves the child a descriptor of the report being written:
// the periodic report's thread (LOWTIDE_STATS_INTERVAL) opens the
// directories on the way to the report's name (O_PATH), the temporary file,
// or the FIFO at that name, for the moment it writes; a fork in another
// thread in that moment gave the child a copy nobody closes (until it
// execs). A FIFO's reader then never saw the end of that report while the
// child lived (the child holds a write end), and a long-lived worker kept
// an open, writable descriptor to the report file.
//
// The program runs itself again with the report on (json, every 100 ms)
// into a fresh directory, first to a regular file, then to a FIFO of ours
// that a thread drains slowly (each report then takes a while to go
// through); meanwhile the main thread forks, and each child lists its
// descriptors and fails if one is under that directory. Before the fix
// (reliability.md no. 97) the FIFO phase gave nearly every child the FIFO
// and the regular-file phase some children a directory or the temporary
// file; now none. A fork that took 2 s or more (the fork gate's bound) is
// counted apart, not failed.
#include "stress_common.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>

namespace {

char g_dir[256];
std::atomic<bool> g_stop{false};
std::atomic<int> g_reader_fd{-1};  // the test's own read end of the FIFO

// The FIFO's reader, slower than the reports come (2 KiB every 100 ms):
// 64 bytes every 10 ms through a one-page pipe, which so stays full, and
// the periodic thread waits in each write (at most its 2 s).
void drain(const char* fifo) {
  char buf[64];
  const int fd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  CHECK(fd >= 0, "open %s: %s", fifo, std::strerror(errno));
  fcntl(fd, F_SETPIPE_SZ, 4096);
  g_reader_fd.store(fd);
  while (!g_stop.load(std::memory_order_relaxed)) {
    (void)read(fd, buf, sizeof buf);
    usleep(10000);
  }
  close(fd);
}

int child_check() {
  return lt::child_fds_check(
      [](int fd, const char* target) { return fd != g_reader_fd.load() && std::strstr(target, g_dir) != nullptr; });
}

int run(bool fifo) {
  std::snprintf(g_dir, sizeof g_dir, "%s", std::getenv("FORK_REPORT_DIR"));
  char name[320];
  std::snprintf(name, sizeof name, "%s/r.json", g_dir);
  std::thread reader;
  if (fifo) {
    reader = std::thread(drain, name);
    while (g_reader_fd.load() < 0) usleep(1000);  // open before the first fork
  }
  const double until = lt::now_seconds() + 4;
  int forks = 0, leaked = 0, excused = 0, slow = 0;
  while (lt::now_seconds() < until) {
    const auto r = lt::fork_and_check(20, 2.0, child_check);
    forks += 20;
    leaked += r.leaked;
    excused += r.excused;
    slow += r.slow;
  }
  g_stop.store(true);
  if (reader.joinable()) reader.join();
  // The exit report into a file (a FIFO nobody reads now would send it to stderr).
  if (fifo) unlink(name);
  std::printf("fork_report_fds (%s): %d forks (%d took 2 s or more), %d children with a descriptor of the "
              "report after a fast fork, %d after a slow one\n",
              fifo ? "FIFO" : "regular file", forks, slow, leaked, excused);
  CHECK(slow < forks / 2, "%d of %d forks took 2 s or more", slow, forks);
  CHECK(leaked == 0, "%d children of a fork under 2 s held a descriptor of the report", leaked);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3) return run(std::strcmp(argv[2], "fifo") == 0);
  lt::arm_watchdog(100, "fork_report_fds");
  char tmpl[] = "/tmp/lowtide-fork-report-XXXXXX";
  CHECK(mkdtemp(tmpl) != nullptr, "mkdtemp: %s", std::strerror(errno));
  int failed = 0;
  for (const char* phase : {"file", "fifo"}) {
    char name[320];
    std::snprintf(name, sizeof name, "%s/r.json", tmpl);
    unlink(name);
    if (std::strcmp(phase, "fifo") == 0) CHECK(mkfifo(name, 0600) == 0, "mkfifo: %s", std::strerror(errno));
    const pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", std::strerror(errno));
    if (pid == 0) {
      setenv("LOWTIDE_STATS", "json", 1);
      setenv("LOWTIDE_STATS_FILE", name, 1);
      setenv("LOWTIDE_STATS_INTERVAL", "100ms", 1);
      setenv("FORK_REPORT_DIR", tmpl, 1);
      execl("/proc/self/exe", argv[0], "run", phase, static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    CHECK(lt::wait_bounded(pid, 60, &status), "the %s run did not end", phase);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("the %s run failed (status %d)\n", phase, status);
      ++failed;
    }
  }
  char cmd[400];
  std::snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
  CHECK(std::system(cmd) == 0, "rm -rf %s", tmpl);
  CHECK(failed == 0, "%d of 2 runs failed", failed);
  std::printf("PASS fork_report_fds\n");
  return 0;
}
