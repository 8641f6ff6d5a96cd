// What the stress tests share: lowtide's counters read through the C API
// (dlsym, so the programs also link and run without the shim, and fail
// there), a run deadline, and a checksummed block type.
#pragma once

#include "../lowtide_test.hpp"

#include <atomic>
#include <cinttypes>
#include <thread>
#include <vector>

#include <dirent.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lowtide_stats.hpp"

namespace lt {

// Bytes handed out and not yet freed, by path, from lowtide's own counters.
struct Live {
  std::int64_t small, large;
};

inline Live live_now() {
  const lowtide_stats s = read_stats();
  // The process-wide large_live atomic and the per-thread counters are kept
  // separately: they must agree whenever nothing is in flight.
  CHECK(s.large_live == s.large_out - s.large_freed,
        "large_live %" PRIu64 " != large_out %" PRIu64 " - large_freed %" PRIu64, s.large_live, s.large_out,
        s.large_freed);
  return {static_cast<std::int64_t>(s.small_out - s.small_freed),
          static_cast<std::int64_t>(s.large_out - s.large_freed)};
}

// The start of the counted part of a test. It prints a line first: stdout
// gets its buffer (a malloc) at the first output, which must not fall
// between the start and the end.
inline Live start_counting(const char* what) {
  std::printf("%s: counting from here\n", what);
  std::fflush(stdout);
  return live_now();
}

// Everything the test allocated has been freed: lowtide's live bytes are
// back where they were before the test's work began. Exactly, on the large
// path. On the small path glibc's own bookkeeping moves a little with the
// threads and libraries the test used (thread stacks it caches with their
// TLS vectors and pthread_setspecific blocks, ld.so's deferred-free lists):
// measured from -128 to +512 bytes here, so up to 4 KiB is allowed. A
// counting error would be off by far more over the tens of thousands of
// small blocks every test frees.
constexpr std::int64_t kGlibcSlack = 4096;

inline void check_balanced(const Live& before, const char* what) {
  const Live after = live_now();
  std::printf("%s: live bytes small %+" PRId64 ", large %+" PRId64 " against the start\n", what,
              after.small - before.small, after.large - before.large);
  CHECK(after.large == before.large, "%s: large live bytes %" PRId64 " at the end, %" PRId64 " at the start", what,
        after.large, before.large);
  const std::int64_t d = after.small - before.small;
  CHECK(d <= kGlibcSlack && d >= -kGlibcSlack, "%s: small live bytes %" PRId64 " at the end, %" PRId64 " at the start",
        what, after.small, before.small);
}

// glibc keeps exited threads' stacks for reuse (up to 40 MiB of them), each
// with the TLS vector it allocated with calloc, and the second-level
// pthread_setspecific block (512 bytes, calloc'ed when a thread first sets
// a key numbered 32 or more, as lowtide's thread-exit key is in most
// processes): those stay live. Running n allocating threads at once first
// fills that cache the way the test's own n threads will, so the live bytes
// at the end can be compared with the start.
inline void warm_thread_cache(int n) {
  for (int round = 0; round < 2; ++round) {
    std::vector<std::thread> ts;
    for (int t = 0; t < n; ++t)
      ts.emplace_back([] {
        void* p = malloc(opaque(std::size_t{64}));
        CHECK(p != nullptr);
        free(p);
      });
    for (auto& t : ts) t.join();
  }
}

// Every run stops by itself: at a fixed amount of work, or at this deadline
// if the machine is slow (the figures printed say how much was done).
struct Deadline {
  double end;
  explicit Deadline(double seconds) : end(now_seconds() + seconds) {}
  bool passed() const { return now_seconds() > end; }
};

// A checksummed block: the checksum of its contents is kept beside the
// pointer and compared before every free or realloc. Blocks up to 8 KiB are
// covered byte for byte; larger ones in their first and last 1 KiB and one
// 8-byte word every 32 KiB (page faults cost 10-30 us each on these VMs, so
// touching every page of every large block would make the tests measure
// faults), which still catches a lost, moved or zeroed page range.
constexpr std::size_t kDense = 8 * KiB;
constexpr std::size_t kStride = 32 * KiB;

template <class F>
inline void for_each_covered(std::size_t n, F f) {
  if (n <= kDense) {
    for (std::size_t i = 0; i < n; ++i) f(i);
    return;
  }
  for (std::size_t i = 0; i < 1024; ++i) f(i);
  for (std::size_t i = 1024 + 8; i + 8 < n - 1024; i += kStride)
    for (std::size_t k = 0; k < 8; ++k) f(i + k);
  for (std::size_t i = n - 1024; i < n; ++i) f(i);
}

// Depends only on the first n bytes' covered offsets, so a realloc's kept
// prefix can be checked with checksum(p, kept) taken before and after.
inline std::uint64_t checksum(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = 1469598103934665603ull ^ n;
  for_each_covered(n, [&](std::size_t i) { h = (h ^ b[i] ^ (i << 8)) * 1099511628211ull; });
  return h;
}

inline void scribble(void* p, std::size_t n, std::uint64_t seed) {
  auto* b = static_cast<unsigned char*>(p);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for_each_covered(n, [&](std::size_t i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = static_cast<unsigned char>(x);
  });
}

inline bool covered_zero(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  bool zero = true;
  for_each_covered(n, [&](std::size_t i) { zero = zero && b[i] == 0; });
  return zero;
}

// A fixed-seed xorshift64 (the seed must not be 0): runs repeat.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
};

struct Block {
  void* p = nullptr;
  std::size_t n = 0;
  std::uint64_t sum = 0;
};

inline Block make_block(std::size_t n, std::uint64_t seed) {
  Block b{malloc(opaque(n)), n, 0};
  CHECK(b.p != nullptr, "malloc(%zu) failed: %s", n, std::strerror(errno));
  scribble(b.p, n, seed);
  b.sum = checksum(b.p, n);
  return b;
}

inline void verify(const Block& b, const char* where) {
  CHECK(checksum(b.p, b.n) == b.sum, "%s: block %p of %zu bytes corrupted", where, b.p, b.n);
}

inline void drop(Block& b, const char* where) {
  verify(b, where);
  free(b.p);
  b = Block{};
}

// In a forked child: 3 if one of its descriptors is one it must not have
// inherited (bad(fd, the readlink of /proc/self/fd/FD) says which; the
// listing's own descriptor is skipped), 4 if they cannot be listed, else 0.
// Each bad one is named on stderr.
template <class Bad>
int child_fds_check(Bad bad) {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return 4;
  int rc = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == dirfd(d)) continue;
    char path[64], target[256];
    std::snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    const ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (bad(fd, static_cast<const char*>(target))) {
      std::fprintf(stderr, "child: fd %s is %s\n", e->d_name, target);
      rc = 3;
    }
  }
  closedir(d);
  return rc;
}

// Forks `forks` times while the caller's other threads work; each child
// runs child_check() and exits with its result (3: it holds a descriptor
// it must not; 4: it could not list its descriptors). A fork that took
// `slow_s` or longer may have run out a bounded wait of lowtide's fork
// handler: its child's leak is counted apart (`excused`), not as `leaked`.
struct ForkLeaks {
  int leaked = 0, excused = 0, slow = 0;
};
template <class Check>
ForkLeaks fork_and_check(int forks, double slow_s, Check child_check) {
  ForkLeaks r;
  for (int k = 0; k < forks; ++k) {
    const double t0 = now_seconds();
    const pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", std::strerror(errno));
    if (pid == 0) _exit(child_check());
    const bool waited_out = now_seconds() - t0 >= slow_s;
    r.slow += waited_out ? 1 : 0;
    int status = 0;
    CHECK(wait_bounded(pid, 10, &status), "child %d did not end", static_cast<int>(pid));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 4, "child could not list its descriptors");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) ++(waited_out ? r.excused : r.leaked);
  }
  return r;
}

}  // namespace lt
