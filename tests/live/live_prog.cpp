// A process for tests/live/live_test.py to look at from outside. Linked
// against liblowtide (so it also runs setuid, where LD_PRELOAD is ignored).
// Reads commands on stdin, one a line, answers one line on stdout:
//   (start)   one large allocation (starts lowtide's decay and live
//             threads), then "ready pid=P baseline_rss=B"
//   hold      1 GiB of large blocks (64 x 16 MiB) and 100000 small blocks of
//             512 bytes on the main thread, 64 MiB of large blocks and 10000
//             small blocks of 1024 bytes on a thread named lt-worker, every
//             byte touched; answers the exact figures it knows
//   fork      a child that makes a large allocation (so it has its own
//             lowtide threads) and waits; answers "child pid=C"
//   closeall  close_range(3, ~0): every fd but 0-2, lowtide's socket too;
//             then /dev/null opened until 1100 fds or EMFILE (so lowtide's
//             old fd number is reused); answers "closed opened=N"
//   checkfds  are those /dev/null fds still open? "fds lost=N"
//   drop      (root) every uid and gid to 4321 (setresgid, setresuid), as a
//             daemon drops root for good: the kernel makes the process not
//             dumpable; answers "dropped dumpable=D"
//   dumpable  prctl(PR_SET_DUMPABLE, 1); answers "dumpable dumpable=D"
//   quit      exit 0
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <malloc.h>
#include <grp.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

namespace {

std::size_t rss_now() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<std::size_t>(resident) * 4096;
}

// Fixed arrays, not a vector: a vector's growth would make large blocks of
// its own and spoil the exact figures.
constexpr std::size_t kMaxBlocks = 110000;
struct Held {
  void* blocks[kMaxBlocks];
  std::size_t n = 0;
  std::size_t large_bytes = 0, large_usable = 0, large_blocks = 0;
  std::size_t small_usable = 0, small_blocks = 0;
};

void hold(Held* h, std::size_t nlarge, std::size_t large_size, std::size_t nsmall, std::size_t small_size) {
  if (h->n + nlarge + nsmall > kMaxBlocks) std::abort();
  for (std::size_t i = 0; i < nlarge; ++i) {
    void* p = std::malloc(large_size);
    if (p == nullptr) std::abort();
    std::memset(p, 1, large_size);
    h->blocks[h->n++] = p;
    h->large_bytes += large_size;
    h->large_usable += malloc_usable_size(p);
    ++h->large_blocks;
  }
  for (std::size_t i = 0; i < nsmall; ++i) {
    void* p = std::malloc(small_size);
    if (p == nullptr) std::abort();
    std::memset(p, 2, small_size);
    h->blocks[h->n++] = p;
    h->small_usable += malloc_usable_size(p);
    ++h->small_blocks;
  }
}

Held main_held, worker_held;
std::atomic<long> worker_tid{0};
std::atomic<bool> worker_done{false};

void* worker(void*) {
  pthread_setname_np(pthread_self(), "lt-worker");
  worker_tid = static_cast<long>(syscall(SYS_gettid));
  hold(&worker_held, 8, std::size_t{8} << 20, 10000, 1024);
  worker_done = true;
  for (;;) pause();  // keeps its blocks, alive
  return nullptr;
}

std::vector<int> opened;

}  // namespace

int main() {
  std::size_t baseline = rss_now();
  void* first = std::malloc(std::size_t{1} << 20);  // large: starts the decay thread
  std::memset(first, 3, std::size_t{1} << 20);
  std::printf("ready pid=%d baseline_rss=%zu\n", static_cast<int>(getpid()), baseline);
  std::fflush(stdout);
  char line[128];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    if (std::strcmp(line, "hold\n") == 0) {
      hold(&main_held, 64, std::size_t{16} << 20, 100000, 512);
      pthread_t t;
      pthread_create(&t, nullptr, &worker, nullptr);
      while (!worker_done) usleep(1000);
      // The 1 MiB block from the start counts too.
      std::printf("held large_bytes=%zu large_usable=%zu large_blocks=%zu small_usable=%zu small_blocks=%zu "
                  "worker_tid=%ld worker_large=%zu worker_small=%zu\n",
                  main_held.large_bytes + worker_held.large_bytes + (std::size_t{1} << 20),
                  main_held.large_usable + worker_held.large_usable + malloc_usable_size(first),
                  main_held.large_blocks + worker_held.large_blocks + 1,
                  main_held.small_usable + worker_held.small_usable, main_held.small_blocks + worker_held.small_blocks,
                  worker_tid.load(), worker_held.large_usable, worker_held.small_usable);
    } else if (std::strcmp(line, "fork\n") == 0) {
      int ready[2];
      if (pipe(ready) != 0) return 2;
      std::fflush(stdout);
      pid_t c = fork();
      if (c == 0) {
        close(ready[0]);
        void* p = std::malloc(std::size_t{2} << 20);  // its own decay and live threads
        std::memset(p, 4, std::size_t{2} << 20);
        if (write(ready[1], "x", 1) != 1) _exit(3);
        // Lives on after the parent (the test kills it), at most 120 s.
        alarm(120);
        for (;;) pause();
      }
      close(ready[1]);
      char b;
      if (read(ready[0], &b, 1) != 1) return 2;
      close(ready[0]);
      std::printf("child pid=%d\n", static_cast<int>(c));
    } else if (std::strcmp(line, "closeall\n") == 0) {
      if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) return 4;
      for (int i = 3; i < 1100; ++i) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd < 0) break;
        opened.push_back(fd);
      }
      std::printf("closed opened=%zu\n", opened.size());
    } else if (std::strcmp(line, "checkfds\n") == 0) {
      std::size_t lost = 0;
      struct stat null_st, st;
      stat("/dev/null", &null_st);
      for (int fd : opened)
        if (fstat(fd, &st) != 0 || st.st_rdev != null_st.st_rdev) ++lost;
      std::printf("fds lost=%zu\n", lost);
    } else if (std::strcmp(line, "drop\n") == 0) {
      if (setgroups(0, nullptr) != 0 || setresgid(4321, 4321, 4321) != 0 || setresuid(4321, 4321, 4321) != 0)
        return 5;
      std::printf("dropped dumpable=%d\n", prctl(PR_GET_DUMPABLE));
    } else if (std::strcmp(line, "dumpable\n") == 0) {
      if (prctl(PR_SET_DUMPABLE, 1) != 0) return 6;
      std::printf("dumpable dumpable=%d\n", prctl(PR_GET_DUMPABLE));
    } else if (std::strcmp(line, "quit\n") == 0) {
      return 0;
    } else {
      std::printf("unknown %s", line);
    }
    std::fflush(stdout);
  }
  return 0;
}
