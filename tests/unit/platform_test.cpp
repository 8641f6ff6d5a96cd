#include <catch2/catch.hpp>
#include <atomic>
#include <thread>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <pthread.h>
#include <unistd.h>

#include "platform.hpp"
#include "under_valgrind.hpp"

using namespace lowtide;

// read_file runs inside malloc (the memory limit's RSS sample) and at init
// (cgroup files under a root a test may fake): it must never block, so a
// FIFO nobody writes is refused, not waited on (a hang here is a failure
// by meson's timeout).
TEST_CASE("read_file reads regular files and refuses a FIFO without blocking") {
  char dir[] = "/tmp/lt-pal-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string fifo = std::string(dir) + "/fifo";
  const std::string file = std::string(dir) + "/file";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  FILE* f = std::fopen(file.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs("max\n", f);
  std::fclose(f);
  char buf[64];
  CHECK(pal::read_file(fifo.c_str(), buf, sizeof buf) == -1);
  CHECK(pal::read_file(file.c_str(), buf, sizeof buf) == 4);
  CHECK(std::string(buf) == "max\n");
  CHECK(pal::read_file("/proc/self/statm", buf, sizeof buf) > 0);  // /proc files are regular
  unlink(fifo.c_str());
  unlink(file.c_str());
  rmdir(dir);
}

TEST_CASE("thread_state: this thread is alive, a tid that is not ours is gone") {
  CHECK(pal::thread_state(getpid(), pal::current_tid()) == pal::ThreadState::alive);
  // The highest possible pid is never one of our threads (pid_max < 2^22).
  CHECK(pal::thread_state(getpid(), (1 << 22) + 7) == pal::ThreadState::gone);
}

// sandbox_since_start compares the seccomp lines of a status file with
// what note_sandbox_at_start read: a filter added since (or a mode raised,
// or, where the kernel shows no filter count, no_new_privs set since) is a
// change for good; an unreadable file is one for now; lines past a long
// Groups line (the file is read in pieces) are found.
TEST_CASE("sandbox_since_start: filters added since start, an unreadable status") {
  using pal::Sandbox;
  char dir[] = "/tmp/lt-pal-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string status = std::string(dir) + "/status";
  const auto write_status = [&](const char* nnp, const char* mode, const char* filters) {
    FILE* f = std::fopen(status.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("Name:\tx\nGroups:\t", f);
    for (int g = 0; g < 200; ++g) std::fprintf(f, "%d ", 100000 + g);
    std::fprintf(f, "\nNoNewPrivs:\t%s\nSeccomp:\t%s\n", nnp, mode);
    if (filters != nullptr) std::fprintf(f, "Seccomp_filters:\t%s\n", filters);
    std::fputs("Speculation_Store_Bypass:\tthread vulnerable\n", f);
    std::fclose(f);
  };
  const auto at_start = [&] {
    pal::set_status_path_for_test(status.c_str());
    pal::note_sandbox_at_start();
  };
  write_status("1", "2", "3");
  at_start();
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);
  write_status("1", "2", "4");
  CHECK(pal::sandbox_since_start() == Sandbox::filtered);  // one more filter
  write_status("1", "2", "3");
  CHECK(pal::sandbox_since_start() == Sandbox::filtered);  // for good: filters are never taken away

  // A kernel before Seccomp_filters: the mode, then no_new_privs.
  write_status("0", "0", nullptr);
  at_start();
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);
  write_status("1", "2", nullptr);
  CHECK(pal::sandbox_since_start() == Sandbox::filtered);
  write_status("0", "2", nullptr);  // a filter from start (a container runtime's)
  at_start();
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);
  write_status("1", "2", nullptr);  // one installed over it by the program
  CHECK(pal::sandbox_since_start() == Sandbox::filtered);
  // With the count shown, no_new_privs alone is no filter (Landlock needs it too).
  write_status("0", "0", "0");
  at_start();
  write_status("1", "0", "0");
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);

  write_status("0", "0", "0");
  at_start();
  REQUIRE(std::remove(status.c_str()) == 0);
  CHECK(pal::sandbox_since_start() == Sandbox::unreadable);
  write_status("0", "0", "0");
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);  // readable again: not for good

  // Unknown at start: as at start whatever comes.
  REQUIRE(std::remove(status.c_str()) == 0);
  at_start();
  write_status("1", "2", "9");
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);

  // The last line without its newline still counts.
  const auto write_raw = [&](const char* text) {
    FILE* f = std::fopen(status.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text, f);
    std::fclose(f);
  };
  write_raw("Seccomp:\t2\nSeccomp_filters:\t5");
  at_start();
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);
  write_raw("Seccomp:\t2\nSeccomp_filters:\t6");
  CHECK(pal::sandbox_since_start() == Sandbox::filtered);
  std::remove(status.c_str());
  rmdir(dir);
  pal::set_status_path_for_test(nullptr);
  pal::note_sandbox_at_start();  // this process's own state again, for the tests after
}

// resident_bytes answers by PAGEMAP_SCAN where the kernel has it (6.7+),
// handing over to mincore once the pages are not sparse, and by mincore
// alone otherwise; both must give the exact resident bytes of what a test
// touched: sparse, dense, every other page (more runs than one scan call
// returns), and a range with an unmapped hole and a PROT_NONE part, which
// count as not resident.
TEST_CASE("resident_bytes: PAGEMAP_SCAN and mincore count the same pages") {
  struct utsname u;
  REQUIRE(uname(&u) == 0);
  // A kernel from 6.7 has the scan; it must then be the one answering.
  const bool scan = !pal::release_below(u.release, 6, 7);
  if (scan) CHECK(pal::resident_scan_works());
  const std::size_t page = 4096, pages = 4096 + 100;  // 16 MiB and more: two mincore calls
  auto* p = static_cast<char*>(mmap(nullptr, pages * page, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  REQUIRE(p != MAP_FAILED);
  // No transparent huge page may fill in pages the test did not touch.
  madvise(p, pages * page, MADV_NOHUGEPAGE);
  // Where the kernel has the scan, it answered each call (a silent
  // fallback to mincore would pass the counts).
  auto both = [&](const void* q, std::size_t len, std::size_t want) {
    const std::uint64_t answers = pal::resident_scan_answers();
    CHECK(pal::resident_bytes(q, len) == want);
    CHECK(pal::resident_scan_answers() == answers + (scan ? 1 : 0));
    CHECK(pal::scans_open_now() == 0);  // every scan closed its window
    CHECK(pal::resident_bytes_mincore(q, len) == want);
  };
  both(p, pages * page, 0);
  std::size_t touched = 0;
  for (std::size_t i = 0; i < pages; i += 64, ++touched) p[i * page] = 1;  // one page in 64
  both(p, pages * page, touched * page);
  // Not page-aligned: the range is rounded out to pages.
  both(p + 10, 64 * page - 20, page);
  for (std::size_t i = 0; i < 1000; i += 2) p[i * page + 5] = 1;  // every other page of the first 1000
  std::size_t want = 0;
  for (std::size_t i = 0; i < pages; ++i) want += (i % 64 == 0 || (i < 1000 && i % 2 == 0)) ? 1 : 0;
  both(p, pages * page, want * page);
  // Every page of the last 200.
  for (std::size_t i = pages - 200; i < pages; ++i) p[i * page] = 1;
  want = 0;
  for (std::size_t i = 0; i < pages; ++i)
    want += (i % 64 == 0 || (i < 1000 && i % 2 == 0) || i >= pages - 200) ? 1 : 0;
  both(p, pages * page, want * page);
  // Dense alone: the scan stops inside a run of present pages (at a
  // sixteenth of the range) and mincore counts the rest.
  both(p + (pages - 200) * page, 200 * page, 200 * page);
  both(p + (pages - 300) * page, 300 * page, (200 + 2) * page);  // two one-in-64 pages before the run
  // A hole (pages 2000-2999 unmapped) and a PROT_NONE part (3000-3099,
  // its pages dropped by the mmap over it).
  REQUIRE(munmap(p + 2000 * page, 1000 * page) == 0);
  REQUIRE(mmap(p + 3000 * page, 100 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
          p + 3000 * page);
  want = 0;
  for (std::size_t i = 0; i < pages; ++i) {
    if (i >= 2000 && i < 3100) continue;
    want += (i % 64 == 0 || (i < 1000 && i % 2 == 0) || i >= pages - 200) ? 1 : 0;
  }
  both(p, pages * page, want * page);
  both(p + 2000 * page, 1000 * page, 0);
  munmap(p, 2000 * page);
  munmap(p + 3000 * page, (pages - 3000) * page);
}

// While a fork is being prepared (its handler's gate shut) the file reads
// open nothing: read_file answers kNoWindow after its 10 ms, the status
// fields and statm "not read" (rss_bytes 0, which its callers take as
// unknown). Until 2026-12-07 they
// opened the file anyway after the 10 ms.
TEST_CASE("read_file: no file opened while a fork is being prepared") {
  char buf[256];
  REQUIRE(pal::read_file("/proc/self/statm", buf, sizeof buf) > 0);
  REQUIRE(pal::rss_bytes() > 0);
  static constexpr const char* kKeys[] = {"VmRSS:"};
  std::uint64_t kib[1] = {0};
  REQUIRE(pal::read_status_kib(kKeys, kib, 1));
  pal::fork_wait_scans();
  buf[0] = 'x';
  CHECK(pal::read_file("/proc/self/statm", buf, sizeof buf) == pal::kNoWindow);
  CHECK(buf[0] == '\0');
  CHECK(pal::rss_bytes() == 0);
  CHECK_FALSE(pal::read_status_kib(kKeys, kib, 1));
  pal::fork_scans_done(false);
  CHECK(pal::read_file("/proc/self/statm", buf, sizeof buf) > 0);
  CHECK(pal::rss_bytes() > 0);
}

// overcommit_refuses before vm.overcommit_memory was ever read, while a
// fork is being prepared (read_file's kNoWindow): the mode is not known,
// and a request larger than RAM + swap is refused as in the default
// heuristic mode all the same. Taken for mode 2 ("the kernel checks"), it
// was granted: lowtide maps with MAP_NORESERVE, which the kernel accounts
// in mode 2 alone, so in mode 0 nothing refused it.
TEST_CASE("overcommit_refuses: a mode not read for want of a fork window still refuses past RAM + swap") {
  char buf[16];
  REQUIRE(pal::read_file("/proc/sys/vm/overcommit_memory", buf, sizeof buf) > 0);
  if (buf[0] != '0') return;  // the heuristic mode's refusal is the one checked
  const std::size_t huge = std::size_t{1} << 46;  // 64 TiB: more than RAM + swap
  pal::set_overcommit_for_test(-1);
  REQUIRE(pal::overcommit_refuses(huge));
  pal::set_overcommit_for_test(-1);
  pal::fork_wait_scans();
  CHECK(pal::overcommit_refuses(huge));
  CHECK_FALSE(pal::overcommit_refuses(std::size_t{1} << 20));
  pal::fork_scans_done(false);
  CHECK(pal::overcommit_refuses(huge));  // read now: mode 0
  pal::set_overcommit_for_test(-1);
}

// The decay thread's start reads the status file under its start lock,
// which fork's prepare handler takes after it has shut the file gate: a
// fork begun meanwhile waits for that lock, so no window can come while
// the start waits for one. The read goes ahead without one (forks_held:
// no child can be made before the file is closed); it used to answer
// "unreadable" after 10 ms, and the start then turned the cache off and
// warned that /proc/thread-self/status could not be read.
TEST_CASE("sandbox_since_start: read, not unreadable, while a fork waits for the caller's lock") {
  using pal::Sandbox;
  char dir[] = "/tmp/lt-pal-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string status = std::string(dir) + "/status";
  const auto write_status = [&](const char* filters) {
    FILE* f = std::fopen(status.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fprintf(f, "Name:\tx\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t%s\n", filters);
    std::fclose(f);
  };
  write_status("1");
  pal::set_status_path_for_test(status.c_str());
  pal::note_sandbox_at_start();
  pal::fork_wait_scans();
  CHECK(pal::sandbox_since_start(false, true) == Sandbox::as_at_start);
  write_status("2");
  CHECK(pal::sandbox_since_start(false, true) == Sandbox::filtered);  // read: one more filter
  CHECK(pal::sandbox_since_start(false) == Sandbox::unreadable);      // not held: not read, for now
  CHECK(pal::scans_open_now() == 0);
  pal::fork_scans_done(false);
  CHECK(pal::sandbox_since_start(false) == Sandbox::filtered);
  std::remove(status.c_str());
  rmdir(dir);
  pal::set_status_path_for_test(nullptr);
  pal::note_sandbox_at_start();  // this process's own state again, for the tests after
}

// resident_bytes_many gives each range what resident_bytes gives it, with
// one descriptor for the batch where the scan answers: sparse, dense (the
// scan hands over to mincore), not page-aligned, and an unmapped hole (0)
// between them; a batch longer than kSpansMax is cut to it.
TEST_CASE("resident_bytes_many: each range's count, one descriptor for all") {
  struct utsname u;
  REQUIRE(uname(&u) == 0);
  const bool scan = !pal::release_below(u.release, 6, 7) && pal::resident_scan_works();
  const std::size_t page = 4096, pages = 2048;
  auto* p = static_cast<char*>(mmap(nullptr, pages * page, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  REQUIRE(p != MAP_FAILED);
  madvise(p, pages * page, MADV_NOHUGEPAGE);
  for (std::size_t i = 0; i < 512; i += 64) p[i * page] = 1;    // sparse: 8 of 512
  for (std::size_t i = 512; i < 768; ++i) p[i * page] = 1;      // dense: 256
  for (std::size_t i = 1024; i < 1100; i += 3) p[i * page] = 1;  // every third
  REQUIRE(munmap(p + 800 * page, 100 * page) == 0);             // a hole
  const pal::Span spans[] = {{p, 512 * page},
                             {p + 512 * page, 256 * page},
                             {p + 1024 * page + 7, 76 * page - 9},
                             {p + 800 * page, 100 * page},
                             {p + 700 * page, 300 * page},  // dense end, the hole, the rest
                             {p, 4 * page}};
  const int n = sizeof spans / sizeof spans[0];
  std::size_t want[n], got[n];
  for (int i = 0; i < n; ++i) want[i] = pal::resident_bytes_mincore(spans[i].p, spans[i].len);
  CHECK(want[0] == 8 * page);
  CHECK(want[1] == 256 * page);
  CHECK(want[3] == 0);
  CHECK(want[4] == 68 * page);
  for (int i = 0; i < n; ++i) got[i] = ~std::size_t{0};
  const std::uint64_t opens = pal::resident_scan_opens(), answers = pal::resident_scan_answers();
  pal::resident_bytes_many(spans, n, got);
  for (int i = 0; i < n; ++i) CHECK(got[i] == want[i]);
  CHECK(pal::resident_scan_opens() == opens + (scan ? 1 : 0));
  CHECK(pal::resident_scan_answers() == answers + (scan ? n : 0));
  CHECK(pal::scans_open_now() == 0);
  // Past kSpansMax: the first kSpansMax are answered, the rest not written.
  std::vector<pal::Span> many(pal::kSpansMax + 3, pal::Span{p, 512 * page});
  std::vector<std::size_t> out(many.size(), 1);
  pal::resident_bytes_many(many.data(), static_cast<int>(many.size()), out.data());
  for (int i = 0; i < pal::kSpansMax; ++i) CHECK(out[static_cast<std::size_t>(i)] == 8 * page);
  for (std::size_t i = pal::kSpansMax; i < many.size(); ++i) CHECK(out[i] == 1);
  munmap(p, 800 * page);
  munmap(p + 900 * page, (pages - 900) * page);
}

// The pagemap's filesystem is asked (fstatfs) again on a device number a
// procfs had, once that procfs is gone: the kernel hands an unmounted
// filesystem's number to the next one mounted (a tmpfs here), and a
// regular file at /proc/thread-self/pagemap there is not procfs's. Until
// no. 91 the number alone was remembered as checked, and the scan opened
// the tmpfs file as a pagemap and sent it the ioctl. In a child with a
// mount namespace of its own (root only: skipped elsewhere).
namespace {
// 0: the tmpfs file was refused; 3: taken for a pagemap; 2: a wrong count;
// 77: not set up (1 is valgrind's: an error it found in the child).
int impostor_child() {
  if (!pal::resident_scan_works()) return 77;
  if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
  if (mount("proc", "/proc", "proc", 0, nullptr) != 0) return 77;
  struct stat ps;
  // The new procfs checked once (its device remembered).
  if (stat("/proc/thread-self/pagemap", &ps) != 0 || !pal::resident_scan_works()) return 77;
  if (umount2("/proc", 0) != 0) return 77;
  // Mounted over one another until one gets the procfs's number (the
  // lowest free one each time: one above it means another took it).
  struct stat ts;
  for (int i = 0;; ++i) {
    if (i == 4096 || mount("lt", "/proc", "tmpfs", 0, "size=64k") != 0 || stat("/proc", &ts) != 0) return 77;
    if (ts.st_dev == ps.st_dev) break;
    if (ts.st_dev > ps.st_dev) return 77;
  }
  if (mkdir("/proc/thread-self", 0700) != 0) return 77;
  const int fd = open("/proc/thread-self/pagemap", O_CREAT | O_WRONLY | O_CLOEXEC, 0400);
  if (fd < 0) return 77;
  close(fd);
  const std::uint64_t opens = pal::resident_scan_opens();
  // One byte of the stack page ps is on (just written: resident). Not ps
  // whole: on a stack laid out so that it crosses a page boundary (1 run in
  // ~28), it is two pages, and the count 8192 was taken for a wrong one.
  const std::size_t got = pal::resident_bytes(&ps, 1);
  if (got != 4096) return 2;
  return pal::resident_scan_opens() == opens ? 0 : 3;
}
}  // namespace

TEST_CASE("resident_bytes: a tmpfs on the number a procfs had is not taken for it") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(impostor_child());
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) {
    WARN("no mount namespace, procfs or tmpfs mount, or no PAGEMAP_SCAN here: not run");
    return;
  }
  CHECK(WEXITSTATUS(status) == 0);
}

// fork's prepare handler waits for the windows other threads hold, and
// not for its own thread's (a fork from a signal handler that interrupted
// one: waiting could only run out the bound). Until 2026-12-06 it waited
// for any window, 10 ms at most.
TEST_CASE("fork gate: a fork waits for other threads' windows, never for its own") {
  pal::ForkGate gate;
  SECTION("its own window: not waited for") {
    REQUIRE(gate.open());
    REQUIRE(gate.open());  // nested
    CHECK(gate.fork_wait());
    CHECK_FALSE(gate.open());  // none opens while the fork is prepared
    gate.fork_done(false);
    gate.close();
    gate.close();
    CHECK(gate.windows.load() == 0);
  }
  SECTION("another thread's window: waited for until it closes") {
    std::atomic<bool> opened{false};
    std::thread holder([&] {
      REQUIRE(gate.open());
      opened.store(true);
      // Closed only once the fork is being prepared: the wait must see it.
      while (gate.forking.load() == 0) std::this_thread::yield();
      gate.close();
    });
    while (!opened.load()) std::this_thread::yield();
    CHECK(gate.fork_wait());
    CHECK(gate.windows.load() == 0);
    gate.fork_done(false);
    holder.join();
  }
  SECTION("in the child: no window, no fork, none of its own") {
    REQUIRE(gate.open());
    CHECK(gate.fork_wait());
    gate.fork_done(true);
    CHECK(gate.windows.load() == 0);
    CHECK(gate.forking.load() == 0);
    gate.close();  // the interrupted window, resumed in the child
    CHECK(gate.windows.load() == 0);
  }
}

// A process made without fork's handlers (_Fork, clone) inherits the
// counts of threads it does not have: its forks start them afresh instead
// of waiting out the bound (2 s) each, and a window opens even where the
// parent was preparing a fork. Until 2026-12-06 the first CHECK failed
// (the wait ran out) and the last one too (no window ever opened).
TEST_CASE("fork gate: counts inherited without fork's handlers are dropped") {
  pal::ForkGate gate;
  std::thread stale([&] { REQUIRE(gate.open()); });  // ends with its window open
  stale.join();
  const int other = static_cast<int>(::getpid()) + 1;
  SECTION("our own process: the window is waited for") {
    gate.owner.store(static_cast<int>(::getpid()));
    CHECK_FALSE(gate.fork_wait());  // nobody will close it: the bound runs out
    gate.fork_done(false);
  }
  SECTION("another process's counts: dropped at the fork") {
    REQUIRE(gate.open());  // one of this thread's own, kept
    gate.owner.store(other);
    CHECK(gate.fork_wait());
    CHECK(gate.windows.load() == 1);
    CHECK(gate.owner.load() == static_cast<int>(::getpid()));
    gate.fork_done(false);
    gate.close();
    CHECK(gate.windows.load() == 0);
  }
  SECTION("another process's fork under way: a window still opens") {
    gate.forking.store(1);
    gate.owner.store(other);
    CHECK(gate.open());
    CHECK(gate.forking.load() == 0);
    gate.close();
    CHECK(gate.windows.load() == 0);
  }
}

// While a fork is being prepared no scan opens its descriptor (the child
// would keep it): resident_bytes answers by mincore, with the same count.
TEST_CASE("resident_bytes: no scan while a fork is being prepared") {
  struct utsname u;
  REQUIRE(uname(&u) == 0);
  const bool scan = !pal::release_below(u.release, 6, 7) && pal::resident_scan_works();
  std::vector<char> touched(64 * 4096, 1);
  const std::size_t want = pal::resident_bytes_mincore(touched.data(), touched.size());
  REQUIRE(want >= 63 * 4096);
  // Two threads forking at once: the first one's parent handler leaves the
  // second's gate shut (review).
  pal::fork_wait_scans();
  pal::fork_wait_scans();
  pal::fork_scans_done(false);
  std::uint64_t answers = pal::resident_scan_answers();
  CHECK(pal::resident_bytes(touched.data(), touched.size()) == want);
  CHECK(pal::resident_scan_answers() == answers);
  pal::fork_scans_done(false);
  answers = pal::resident_scan_answers();
  CHECK(pal::resident_bytes(touched.data(), touched.size()) == want);
  CHECK(pal::resident_scan_answers() == answers + (scan ? 1 : 0));
}

// read_own_memory is how symbolize.cpp and sites.cpp read a loaded object's
// headers, link_map and name, which another thread's dlclose may unmap or
// free at any moment: a page that is gone or PROT_NONE must be a false
// answer, never a SIGSEGV (a crash here fails the test run). errno kept.
TEST_CASE("read_own_memory: readable bytes copied; unmapped and PROT_NONE pages refused, no fault") {
  const std::size_t page = pal::kPageSize;
  auto* m = static_cast<char*>(mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(static_cast<void*>(m) != MAP_FAILED);
  for (std::size_t i = 0; i < 4 * page; ++i) m[i] = static_cast<char>('a' + i % 26);
  char buf[64];
  errno = 1234;
  REQUIRE(pal::read_own_memory(m + 10, buf, sizeof buf));  // process_vm_readv on the own pid works here
  CHECK(std::memcmp(buf, m + 10, sizeof buf) == 0);
  CHECK(pal::read_own_memory(m, buf, 0));
  // Page 1 unmapped, page 2 PROT_NONE, pages 0 and 3 readable.
  REQUIRE(munmap(m + page, page) == 0);
  REQUIRE(mprotect(m + 2 * page, page, PROT_NONE) == 0);
  CHECK_FALSE(pal::read_own_memory(m + page, buf, 8));
  CHECK_FALSE(pal::read_own_memory(m + 2 * page + 100, buf, 8));
  // A read that starts readable and runs into the hole is refused whole.
  CHECK_FALSE(pal::read_own_memory(m + page - 4, buf, 8));
  CHECK_FALSE(pal::read_own_memory(m + 3 * page - 4, buf, 8));
  CHECK(pal::read_own_memory(m + 3 * page, buf, 8));
  CHECK(pal::read_own_memory(m + page - 8, buf, 8));
  CHECK(pal::read_own_memory(nullptr, buf, 8) == false);
  CHECK(errno == 1234);

  // Strings: a NUL before the page's end is found without touching the hole
  // after it; one that runs into the hole, or past cap, is refused.
  std::memcpy(m + page - 6, "hello", 6);
  char s[32];
  CHECK(pal::read_own_string(m + page - 6, s, sizeof s) == 5);
  CHECK(std::string(s) == "hello");
  CHECK(pal::own_string_is(m + page - 6, "hello") == 1);
  CHECK(pal::own_string_is(m + page - 6, "help") == 0);
  CHECK(pal::own_string_is(m + page - 6, "hell") == 0);
  CHECK(pal::own_string_is(m + page - 6, "hello world") == 0);  // differs at the NUL: the hole is not read
  m[page - 1] = 'x';  // no NUL before the hole
  CHECK(pal::read_own_string(m + page - 6, s, sizeof s) == -1);
  CHECK(pal::own_string_is(m + page - 6, "hellox") == -1);
  CHECK(pal::read_own_string(m + 2 * page, s, sizeof s) == -1);
  CHECK(pal::own_string_is(m + 2 * page, "x") == -1);
  // A string across a page boundary, read in two pieces.
  auto* n = static_cast<char*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(static_cast<void*>(n) != MAP_FAILED);
  std::memset(n, 'q', 2 * page);
  std::memcpy(n + page - 3, "abc", 3);
  std::memcpy(n + page, "defg", 5);
  CHECK(pal::read_own_string(n + page - 3, s, sizeof s) == 7);
  CHECK(std::string(s) == "abcdefg");
  CHECK(pal::own_string_is(n + page - 3, "abcdefg") == 1);
  CHECK(pal::read_own_string(n + page - 3, s, 7) == -1);  // no room for the NUL
  CHECK(pal::read_own_string(n + page - 3, s, 8) == 7);
  CHECK(errno == 1234);
  munmap(n, 2 * page);
  munmap(m, page);
  munmap(m + 2 * page, 2 * page);
}

// The race itself, bounded: one thread maps and unmaps a page in a loop
// while this one reads it through read_own_memory. Every read either
// copies the page's bytes or is refused; none faults.
TEST_CASE("read_own_memory: a page unmapped by another thread while it is read") {
  const std::size_t page = pal::kPageSize;
  char* const at = static_cast<char*>(mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(static_cast<void*>(at) != MAP_FAILED);  // not as a char* (Catch would print it)
  REQUIRE(munmap(at, page) == 0);  // a hole whose address the other thread maps and unmaps
  std::atomic<bool> stop{false};
  std::atomic<long> cycles{0};
  std::thread flip([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      void* p = mmap(at, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (p != at) {
        if (p != MAP_FAILED) munmap(p, page);
        continue;
      }
      std::memset(at, 'z', page);
      munmap(at, page);
      cycles.fetch_add(1, std::memory_order_relaxed);
    }
  });
  long ok = 0, refused = 0;
  char buf[256];
  for (int i = 0; i < 200000 && (cycles.load(std::memory_order_relaxed) < 2000 || ok == 0 || refused == 0); ++i) {
    if (pal::read_own_memory(at + 512, buf, sizeof buf)) {
      ++ok;
      // A fresh page is zeros until the other thread fills it.
      CHECK((buf[0] == 'z' || buf[0] == '\0'));
    } else {
      ++refused;
    }
  }
  stop.store(true);
  flip.join();
  INFO("copied " << ok << ", refused " << refused << ", map/unmap cycles " << cycles.load());
  // valgrind runs one thread at a time, and which side of the other
  // thread's cycle each read lands on is its scheduler's: it may not run
  // the other thread at all in the reads' time (0 cycles, every read
  // refused: a scripts/test run of 2026-12-06), or switch only while the
  // page is mapped (461,972 cycles, every read copied: 2026-12-07). Either
  // way no read faulted, which is what is tested; the other outcome is
  // then only warned of there.
  if (under_valgrind() && refused == 0) WARN("valgrind's scheduling gave no refused read: only the copy is exercised");
  else CHECK(refused > 0);
  if (under_valgrind() && cycles.load() == 0) WARN("valgrind ran no map/unmap cycle: only the refusal is exercised");
  else CHECK(cycles.load() > 0);
}

// A program whose main thread has ended with pthread_exit: the thread group
// leader is a zombie whose mm is gone, and process_vm_readv on getpid()
// answers ESRCH. Every read would then be refused (each call site losing
// its module and name). Asked by the calling thread's own id, it is read.
namespace {
void* read_from_other_thread(void*) {
  static const char text[] = "still here";
  char buf[sizeof text] = {};
  // Wait (at most ~5 s) for the main thread to be a zombie.
  for (int i = 0; i < 500; ++i) {
    char path[64], st[256] = {};
    std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(getpid()));
    FILE* f = std::fopen(path, "r");
    if (f != nullptr) {
      std::size_t n = std::fread(st, 1, sizeof st - 1, f);
      std::fclose(f);
      st[n] = '\0';
    }
    const char* close = std::strrchr(st, ')');
    if (f == nullptr || (close != nullptr && (close[2] == 'Z' || close[2] == 'X'))) break;
    usleep(10000);
  }
  const bool ok = pal::read_own_memory(text, buf, sizeof text) && std::memcmp(buf, text, sizeof text) == 0;
  _exit(ok ? 0 : 3);
}
}  // namespace

TEST_CASE("read_own_memory: works after the main thread has called pthread_exit") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    pthread_t t;
    if (pthread_create(&t, nullptr, read_from_other_thread, nullptr) != 0) _exit(2);
    // pthread_exit would unwind into Catch (a forced unwind it catches):
    // the bare exit syscall ends this thread alone, as pthread_exit does.
    ::syscall(SYS_exit, 0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
