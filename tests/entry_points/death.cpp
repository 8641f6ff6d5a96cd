// Death tests: an invalid or double free of a LARGE block, and a small block
// freed twice in a row (the thread cache's newest of its class), must print
//   lowtide: free(): double free or invalid pointer 0x<ptr>
// on stderr and abort (SIGABRT); so must a malloc that meets a cached small
// block whose link a write after its free has broken. Each case runs in a forked child; the parent
// collects the child's stderr through a pipe and waits with a deadline.
//
// Only meaningful under lowtide: LOWTIDE_TEST_LIB must be set (the test is
// registered with preload_env only). Without it the program fails rather than
// silently skipping.

#include "lowtide_test.hpp"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <malloc.h>
#include <poll.h>
#include <sys/resource.h>

using lt::MiB;
using lt::opaque;

namespace {

// The spec: every invalid/double free of a large block -- whichever entry point
// it came through (free, operator delete) -- reports as free(); realloc names
// itself, as glibc does.
constexpr const char* kMessage = "lowtide: free(): double free or invalid pointer";

struct Case {
  const char* name;
  // Runs in the child. Returns the pointer that the shim should report; the
  // child writes it to stdout before the fatal call.
  void (*run)(int report_fd);
  bool expect_abort;
  const char* message = kMessage;  // expected on stderr, followed by " 0x<ptr>"
};

void report(int fd, const void* p) {
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "%#lx\n", static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(p)));
  ssize_t w = write(fd, buf, static_cast<std::size_t>(n));
  (void)w;
}

unsigned char* large(std::size_t n = 2 * MiB) {
  auto* p = static_cast<unsigned char*>(malloc(opaque(n)));
  CHECK(p != nullptr);
  p[0] = 1;
  p[n - 1] = 1;
  return opaque(p);
}

void case_double_free(int fd) {
  unsigned char* p = large();
  free(opaque(p));
  report(fd, p);
  free(opaque(p));
}

void case_free_middle(int fd) {
  unsigned char* p = large();
  unsigned char* mid = opaque(p + MiB);
  report(fd, mid);
  free(mid);
}

void case_free_plus16(int fd) {
  unsigned char* p = large();
  unsigned char* q = opaque(p + 16);
  report(fd, q);
  free(q);
}

void case_realloc_freed(int fd) {
  unsigned char* p = large();
  free(opaque(p));
  report(fd, p);
  void* r = realloc(opaque(p), 4 * MiB);
  opaque(r);
}

// realloc(p, 0) frees p (glibc 2.36 semantics): freeing p again is a double free.
void case_realloc_zero_then_free(int fd) {
  unsigned char* p = large();
  void* r = realloc(opaque(p), opaque(std::size_t{0}));
  CHECK(r == nullptr, "realloc(p, 0) returned %p", r);
  report(fd, p);
  free(opaque(p));
}

// A large block from posix_memalign (big alignment) double-freed.
void case_aligned_double_free(int fd) {
  void* p = nullptr;
  CHECK(posix_memalign(&p, opaque(std::size_t{4} * MiB), 3 * MiB) == 0);
  free(opaque(p));
  report(fd, p);
  free(opaque(p));
}

// operator delete of a freed large block goes through the same check.
void case_delete_freed(int fd) {
  void* p = ::operator new(opaque(3 * MiB));
  ::operator delete(opaque(p));
  report(fd, p);
  ::operator delete(opaque(p));
}

// reallocf frees the block when it fails: freeing it afterwards must abort.
void case_reallocf_frees(int fd) {
  using reallocf_t = void* (*)(void*, std::size_t);
  auto f = reinterpret_cast<reallocf_t>(dlsym(RTLD_DEFAULT, "reallocf"));
  CHECK(f != nullptr, "reallocf not exported");
  unsigned char* p = large();
  void* r = f(opaque(p), opaque(SIZE_MAX - 100));
  CHECK(r == nullptr);
  report(fd, p);
  free(opaque(p));
}

// The block's last byte, and the 16 bytes before it (where its header is).
void case_free_last_byte(int fd) {
  unsigned char* p = large(3 * MiB);
  unsigned char* q = opaque(p + 3 * MiB - 1);
  report(fd, q);
  free(q);
}

void case_free_header(int fd) {
  unsigned char* p = large();
  unsigned char* q = opaque(p - 16);
  report(fd, q);
  free(q);
}

// A freed block sits in the reuse cache, its pages still mapped: a pointer
// into it is still no live block.
void case_free_middle_of_cached(int fd) {
  unsigned char* p = large(4 * MiB);
  free(opaque(p));
  unsigned char* q = opaque(p + 2 * MiB);
  report(fd, q);
  free(q);
}

// Inside lowtide's range, far from anything ever handed out.
void case_free_never_allocated(int fd) {
  unsigned char* p = large();
  unsigned char* q = opaque(p + std::size_t{64} * 1024 * MiB);
  report(fd, q);
  free(q);
}

void case_delete_array_middle(int fd) {
  auto* p = new unsigned char[opaque(5 * MiB)];
  unsigned char* q = opaque(p + 4096);
  report(fd, q);
  delete[] q;
}

// Two threads free the same large block at once: one of them gets it, the
// other must abort (the live-table slot is claimed atomically).
void case_concurrent_double_free(int fd) {
  for (int round = 0; round < 1000; ++round) {
    unsigned char* p = large();
    std::atomic<int> ready{0};
    std::thread t([&] {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      free(opaque(p));
    });
    if (round == 0) report(fd, p);
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    free(opaque(p));
    t.join();
    // Only reached if neither free aborted, which must not happen.
  }
}

// A thread caches small blocks from its 256th free on (small_path.hpp).
void warm_thread_cache() {
  for (int i = 0; i < 300; ++i) free(opaque(malloc(opaque(std::size_t{16}))));
}

// A small block freed twice with no other free of its class between: the
// second free finds it the newest block of its bin in the thread cache.
void case_small_double_free(int fd) {
  warm_thread_cache();
  void* p = malloc(opaque(std::size_t{64}));
  CHECK(p != nullptr);
  free(opaque(p));
  report(fd, p);
  free(opaque(p));
}

// The same through operator delete, a class of its own.
void case_small_delete_twice(int fd) {
  warm_thread_cache();
  auto* p = new char[opaque(std::size_t{200})];
  delete[] opaque(p);
  report(fd, p);
  delete[] opaque(p);
}

// A write into a freed small block (use after free) that breaks the link
// the thread cache keeps there: the next malloc of its class stops instead
// of handing out the written value as a block.
void case_small_link_broken(int fd) {
  warm_thread_cache();
  auto* p = static_cast<std::uintptr_t*>(malloc(opaque(std::size_t{48})));
  CHECK(p != nullptr);
  free(opaque(p));
  *static_cast<volatile std::uintptr_t*>(opaque(p)) = 0x4142434445464748;
  report(fd, p);
  void* q = malloc(opaque(std::size_t{48}));
  report(fd, q);  // not reached (the harness compares the last pointer reported)
}

// Control: valid large and small alloc/free, exits 0. Guards against a harness
// that would "pass" every case.
void case_control(int fd) {
  unsigned char* p = large();
  void* s = malloc(opaque(std::size_t{100}));
  free(s);
  free(p);
  p = large(5 * MiB);
  p = static_cast<unsigned char*>(realloc(p, 9 * MiB));
  free(opaque(p));
  free(nullptr);
  report(fd, nullptr);
}

// The same where the broken block is the head of a bin another thread's
// blocks filled: the free that hands the full bin to the shelf reads the
// head's link (small_path.cpp shelf_give) and stops there, before another
// thread could take the bin and follow the link. Each freed block's link
// is broken at once, so whichever is the head when the bin fills is broken.
void case_small_link_broken_shelf(int fd) {
  std::vector<void*> blocks;
  for (int i = 0; i < 200; ++i) {
    void* p = malloc(opaque(std::size_t{48}));
    CHECK(p != nullptr);
    blocks.push_back(p);
  }
  std::thread t([&] {
    warm_thread_cache();
    for (void* p : blocks) {
      free(opaque(p));
      *static_cast<volatile std::uintptr_t*>(opaque(p)) = 0x4142434445464748;
      report(fd, p);  // the bin's head when the next free finds it full
    }
  });
  t.join();
  // Only reached if no free stopped the process, which must not happen.
}

const Case kCases[] = {
    {"control (valid frees)", case_control, false},
    {"double free of 2 MiB block", case_double_free, true},
    {"free of pointer into the middle of a large block", case_free_middle, true},
    {"free of large pointer + 16", case_free_plus16, true},
    // Like glibc ("realloc(): invalid pointer"), the message names the call.
    {"realloc of a freed large pointer", case_realloc_freed, true,
     "lowtide: realloc(): double free or invalid pointer"},
    {"free after realloc(p, 0)", case_realloc_zero_then_free, true},
    {"double free of posix_memalign(4 MiB) block", case_aligned_double_free, true},
    {"operator delete of freed large block", case_delete_freed, true},
    {"free after failed reallocf", case_reallocf_frees, true},
    {"free of a large block's last byte", case_free_last_byte, true},
    {"free of large pointer - 16 (its header)", case_free_header, true},
    {"free into the middle of a cached (freed) block", case_free_middle_of_cached, true},
    {"free of a never-allocated address in the range", case_free_never_allocated, true},
    {"delete[] of a pointer into a large array", case_delete_array_middle, true},
    {"the same large block freed by two threads at once", case_concurrent_double_free, true},
    {"a 64-byte block freed twice in a row", case_small_double_free, true},
    {"delete[] twice of a 200-byte array", case_small_delete_twice, true},
    {"malloc after a write into a freed 48-byte block", case_small_link_broken, true,
     "lowtide: malloc(): corrupted thread cache at"},
    {"free of another thread's 48-byte block onto a bin whose head was written after free",
     case_small_link_broken_shelf, true, "lowtide: free(): corrupted thread cache at"},
};

std::string read_all_bounded(int fd, double seconds) {
  std::string out;
  const double deadline = lt::now_seconds() + seconds;
  char buf[4096];
  for (;;) {
    const double left = deadline - lt::now_seconds();
    if (left <= 0) break;
    pollfd pfd{fd, POLLIN, 0};
    int r = poll(&pfd, 1, static_cast<int>(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// Returns true when the case behaved as expected.
bool run_case(const Case& c) {
  int err_pipe[2], out_pipe[2];
  CHECK(pipe(err_pipe) == 0 && pipe(out_pipe) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", std::strerror(errno));
  if (pid == 0) {
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    alarm(10);
    dup2(err_pipe[1], 2);
    close(err_pipe[0]);
    close(err_pipe[1]);
    close(out_pipe[0]);
    c.run(out_pipe[1]);
    _exit(0);
  }
  close(err_pipe[1]);
  close(out_pipe[1]);
  const std::string err = read_all_bounded(err_pipe[0], 15);
  const std::string out = read_all_bounded(out_pipe[0], 1);
  close(err_pipe[0]);
  close(out_pipe[0]);
  int status = 0;
  const bool reaped = lt::wait_bounded(pid, 15, &status);
  char desc[128];
  lt::describe_status(status, desc, sizeof desc);

  bool ok = true;
  auto complain = [&](const char* why) {
    std::fprintf(stderr, "FAIL [%s]: %s\n  child %s\n  child stderr: <<%s>>\n", c.name, why, desc, err.c_str());
    ok = false;
  };
  if (!reaped) {
    complain("child did not finish within 15 s (killed)");
    return false;
  }
  if (!c.expect_abort) {
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) complain("expected a clean exit(0)");
    if (err.find("lowtide:") != std::string::npos) complain("unexpected lowtide message on stderr");
    return ok;
  }
  if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT)) complain("expected the child to die of SIGABRT");
  const std::size_t at = err.find(c.message);
  if (at == std::string::npos) {
    char why[200];
    std::snprintf(why, sizeof why, "stderr lacks \"%s\"", c.message);
    complain(why);
  } else {
    // The message should name the pointer the program passed: the last
    // one it reported before it stopped.
    const std::size_t last = out.find_last_of('\n', out.empty() ? 0 : out.size() - 2);
    const unsigned long want = std::strtoul(out.c_str() + (last == std::string::npos ? 0 : last + 1), nullptr, 16);
    const char* hex = err.c_str() + at + std::strlen(c.message);
    while (*hex == ' ') ++hex;
    const unsigned long got = std::strtoul(hex, nullptr, 16);
    if (std::strncmp(hex, "0x", 2) != 0 || got != want) {
      char why[200];
      std::snprintf(why, sizeof why, "message names pointer %#lx, the program passed %#lx", got, want);
      complain(why);
    }
  }
  return ok;
}

}  // namespace

int main() {
  lt::arm_watchdog(100, "death");
  if (!lt::under_lowtide()) {
    std::fprintf(stderr,
                 "FAIL: LOWTIDE_TEST_LIB is not set; death tests only make sense with liblowtide preloaded\n");
    return 1;
  }
  int failed = 0;
  for (const Case& c : kCases) {
    const bool ok = run_case(c);
    std::printf("%-55s %s\n", c.name, ok ? "ok" : "FAILED");
    std::fflush(stdout);
    if (!ok) ++failed;
  }
  if (failed) {
    std::fprintf(stderr, "death: %d case(s) failed\n", failed);
    return 1;
  }
  std::printf("PASS death\n");
  return 0;
}
