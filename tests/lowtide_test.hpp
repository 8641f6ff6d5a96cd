// Tiny self-contained test helpers for programs that run under LD_PRELOAD.
// Deliberately no test framework: these binaries must behave identically
// with and without the shim, and fail loudly (non-zero exit) with a message.
#pragma once

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace lt {

// Print and terminate immediately: no atexit handlers, no static destructors,
// no waiting for other threads (a failed check in a worker must not hang).
[[noreturn]] inline void fail_now(const char* file, int line, const char* expr, const char* msg) {
  std::fprintf(stderr, "FAIL %s:%d: CHECK(%s)%s%s\n", file, line, expr, msg[0] ? ": " : "", msg);
  std::fflush(stderr);
  std::fflush(stdout);
  _exit(1);
}

}  // namespace lt

// CHECK(cond) / CHECK(cond, "fmt", args...)
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      char lt_msg_buf_[512] = "";                                              \
      __VA_OPT__(std::snprintf(lt_msg_buf_, sizeof lt_msg_buf_, __VA_ARGS__);) \
      ::lt::fail_now(__FILE__, __LINE__, #cond, lt_msg_buf_);                  \
    }                                                                          \
  } while (0)

namespace lt {

// Hide a value from the optimiser: stops malloc/free pair elision, constant
// folding of huge sizes (and the -Walloc-size-larger-than that comes with it),
// and alignment assumptions derived from the allocation function.
template <class T>
inline T opaque(T v) {
  asm volatile("" : "+r"(v) : : "memory");
  return v;
}

// A "Key:" line of /proc/self/status in KiB (VmRSS:, VmLck:, ...), read
// with open/read: no stdio buffer, no allocation between two readings.
inline std::size_t status_kib(const char* key) {
  char buf[8192] = "";
  const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0, "open /proc/self/status: %s", std::strerror(errno));
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  CHECK(n > 0);
  const char* at = std::strstr(buf, key);
  CHECK(at != nullptr, "no %s in /proc/self/status", key);
  return std::strtoull(at + std::strlen(key), nullptr, 10);
}

inline bool aligned_to(const void* p, std::size_t align) {
  volatile std::uintptr_t v = reinterpret_cast<std::uintptr_t>(p);
  return (v % align) == 0;
}

inline bool under_lowtide() {
  const char* s = std::getenv("LOWTIDE_TEST_LIB");
  return s != nullptr && s[0] != '\0';
}

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * 1024;
constexpr std::size_t kDefaultCutoff = 128 * KiB;  // LOWTIDE_CUTOFF's default

// LOWTIDE_CUTOFF as the shim would read it ("512K", "1M", "2097152");
// default 128 KiB. Only used to pick sizes on both sides of the cutoff.
inline std::size_t cutoff() {
  const char* s = std::getenv("LOWTIDE_CUTOFF");
  if (s == nullptr || *s == '\0') return kDefaultCutoff;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end != nullptr) {
    switch (*end) {
      case 'k': case 'K': v *= KiB; break;
      case 'm': case 'M': v *= MiB; break;
      case 'g': case 'G': v *= 1024 * MiB; break;
      default: break;
    }
  }
  return v == 0 ? kDefaultCutoff : static_cast<std::size_t>(v);
}

inline unsigned char pattern_byte(std::size_t i, unsigned seed) {
  return static_cast<unsigned char>((i * 131u) ^ (i >> 9) ^ (seed * 0x9Eu) ^ 0x5Au);
}

// Dense pattern for blocks up to `dense_limit`, strided above that (large
// blocks: every page touched at a few offsets, plus the first and last 4 KiB).
inline void fill_pattern(void* p, std::size_t n, unsigned seed, std::size_t dense_limit = 256 * KiB) {
  auto* b = static_cast<unsigned char*>(p);
  if (n <= dense_limit) {
    for (std::size_t i = 0; i < n; ++i) b[i] = pattern_byte(i, seed);
    return;
  }
  for (std::size_t i = 0; i < 4096 && i < n; ++i) b[i] = pattern_byte(i, seed);
  for (std::size_t i = 4096; i < n; i += 509) b[i] = pattern_byte(i, seed);
  for (std::size_t i = n - 4096; i < n; ++i) b[i] = pattern_byte(i, seed);
}

// Returns the first mismatching offset, or SIZE_MAX when all is well.
inline std::size_t find_pattern_mismatch(const void* p, std::size_t n, unsigned seed,
                                         std::size_t dense_limit = 256 * KiB) {
  const auto* b = static_cast<const unsigned char*>(p);
  if (n <= dense_limit) {
    for (std::size_t i = 0; i < n; ++i)
      if (b[i] != pattern_byte(i, seed)) return i;
    return SIZE_MAX;
  }
  for (std::size_t i = 0; i < 4096 && i < n; ++i)
    if (b[i] != pattern_byte(i, seed)) return i;
  for (std::size_t i = 4096; i < n; i += 509)
    if (b[i] != pattern_byte(i, seed)) return i;
  for (std::size_t i = n - 4096; i < n; ++i)
    if (b[i] != pattern_byte(i, seed)) return i;
  return SIZE_MAX;
}

// A prefix check after realloc: only offsets < n that fill_pattern(old_n)
// wrote. With a strided fill, offsets between strides were never written.
inline std::size_t find_prefix_mismatch(const void* p, std::size_t old_n, std::size_t n, unsigned seed,
                                        std::size_t dense_limit = 256 * KiB) {
  const auto* b = static_cast<const unsigned char*>(p);
  auto written = [&](std::size_t i) {
    if (old_n <= dense_limit) return true;
    return i < 4096 || i >= old_n - 4096 || (i - 4096) % 509 == 0;
  };
  if (old_n <= dense_limit) {
    for (std::size_t i = 0; i < n; ++i)
      if (b[i] != pattern_byte(i, seed)) return i;
    return SIZE_MAX;
  }
  for (std::size_t i = 0; i < 4096 && i < n; ++i)
    if (b[i] != pattern_byte(i, seed)) return i;
  for (std::size_t i = 4096; i < n && i < old_n; i += 509)
    if (b[i] != pattern_byte(i, seed)) return i;
  for (std::size_t i = old_n - 4096; i < n && i < old_n; ++i)
    if (written(i) && b[i] != pattern_byte(i, seed)) return i;
  return SIZE_MAX;
}

// A symbol of a dlopen'ed library, as a function pointer of type F.
template <class F>
F dl_sym(void* handle, const char* name) {
  void* s = dlsym(handle, name);
  CHECK(s != nullptr, "dlsym(%s): %s", name, dlerror());
  return reinterpret_cast<F>(s);
}

inline double now_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Watchdog: a hang anywhere (deadlock in the allocator, a stuck child) turns
// into a clear failure after `seconds` instead of waiting for the meson timeout.
inline const char* g_watchdog_name = "test";
extern "C" inline void lt_watchdog_handler(int) {
  static const char msg[] = "FAIL: watchdog expired (hang/deadlock?) in ";
  ssize_t r = write(2, msg, sizeof msg - 1);
  r = write(2, g_watchdog_name, std::strlen(g_watchdog_name));
  r = write(2, "\n", 1);
  (void)r;
  _exit(3);
}
inline void arm_watchdog(unsigned seconds, const char* name) {
  g_watchdog_name = name;
  struct sigaction sa{};
  sa.sa_handler = lt_watchdog_handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, nullptr);
  alarm(seconds);
}

// waitpid with a deadline. On timeout the child is SIGKILLed and reaped and
// false is returned.
inline bool wait_bounded(pid_t pid, double seconds, int* status) {
  const double deadline = now_seconds() + seconds;
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) {
      std::fprintf(stderr, "waitpid(%d): %s\n", static_cast<int>(pid), std::strerror(errno));
      return false;
    }
    if (now_seconds() > deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
      }
      return false;
    }
    usleep(1000);
  }
}

inline void describe_status(int status, char* buf, std::size_t n) {
  if (WIFEXITED(status))
    std::snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    std::snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    std::snprintf(buf, n, "status 0x%x", status);
}

}  // namespace lt

namespace lt {

constexpr std::size_t kPageBytes = 4096;

// Resident bytes of the pages that [p, p + n) lies on.
inline std::size_t resident_bytes(const void* p, std::size_t n) {
  const auto lo = reinterpret_cast<std::uintptr_t>(p) & ~(kPageBytes - 1);
  const auto hi = (reinterpret_cast<std::uintptr_t>(p) + n + kPageBytes - 1) & ~(kPageBytes - 1);
  std::vector<unsigned char> vec((hi - lo) / kPageBytes);
  CHECK(mincore(reinterpret_cast<void*>(lo), hi - lo, vec.data()) == 0, "mincore: %s", std::strerror(errno));
  std::size_t pages = 0;
  for (unsigned char v : vec) pages += v & 1;
  return pages * kPageBytes;
}

}  // namespace lt
