// malloc, calloc, free, malloc_usable_size, malloc_trim/mallinfo2, overflow,
// the kernel's refusals and cross-thread frees (entry_points.cpp runs them).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include "entry_points.hpp"

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace entry {

// ---------------------------------------------------------------- alignment
void test_alignment() {
  std::vector<void*> blocks;
  blocks.reserve(4200);
  for (std::size_t n = 0; n <= 4096; ++n) {
    void* p = xmalloc(n);
    CHECK(lt::aligned_to(p, 16), "malloc(%zu) = %p not 16-byte aligned", n, p);
    if (n) static_cast<unsigned char*>(p)[n - 1] = 1;
    blocks.push_back(p);
  }
  for (void* p : blocks) release(p);
  blocks.clear();

  const std::size_t c = g_cutoff;
  const std::size_t big[] = {64 * KiB, 128 * KiB + 1, c / 2 + 8, c - 1, c, c + 1, c + 4095, 2 * c + 17,
                             3 * MiB + 5, 16 * MiB};
  for (std::size_t n : big) {
    void* p = xmalloc(n);
    CHECK(lt::aligned_to(p, 16), "malloc(%zu) = %p not 16-byte aligned", n, p);
    static_cast<unsigned char*>(p)[0] = 1;
    static_cast<unsigned char*>(p)[n - 1] = 1;
    void* q = calloc(opaque(n), 1);
    CHECK(q != nullptr && lt::aligned_to(q, 16), "calloc(%zu,1) = %p not 16-byte aligned", n, q);
    void* r = realloc(opaque(q), opaque(n + 100));
    CHECK(r != nullptr && lt::aligned_to(r, 16), "realloc(.., %zu) = %p not 16-byte aligned", n + 100, r);
    release(p);
    release(r);
  }
  for (std::size_t n = 1; n < 200; n += 7) {
    void* q = calloc(opaque(n), 3);
    CHECK(q != nullptr && lt::aligned_to(q, 16), "calloc(%zu,3) = %p", n, q);
    release(q);
  }
}

// ---------------------------------------------------------------- malloc(0)
void test_malloc_zero() {
  std::vector<void*> ps;
  for (int i = 0; i < 64; ++i) {
    void* p = malloc(opaque(std::size_t{0}));
    CHECK(p != nullptr, "malloc(0) returned NULL");
    CHECK(lt::aligned_to(p, 16), "malloc(0) = %p not 16-byte aligned", p);
    ps.push_back(opaque(p));
  }
  std::vector<void*> sorted = ps;
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), "malloc(0) returned a duplicate pointer");
  for (void* p : ps) release(p);
}

// ----------------------------------------------------------- size overflow
void expect_enomem(void* p, const char* what) {
  const int e = errno;
  CHECK(p == nullptr, "%s returned %p, expected NULL", what, p);
  CHECK(e == ENOMEM, "%s: errno = %d (%s), expected ENOMEM", what, e, std::strerror(e));
}

void test_overflow() {
  const std::size_t huge_sizes[] = {kHuge, kHuge + 4096, SIZE_MAX, SIZE_MAX - 4096, SIZE_MAX - 63};
  for (std::size_t n : huge_sizes) {
    errno = 0;
    expect_enomem(malloc(opaque(n)), "malloc(>PTRDIFF_MAX)");
    errno = 0;
    expect_enomem(calloc(opaque(n), 1), "calloc(>PTRDIFF_MAX, 1)");
    errno = 0;
    expect_enomem(calloc(1, opaque(n)), "calloc(1, >PTRDIFF_MAX)");
    errno = 0;
    expect_enomem(realloc(nullptr, opaque(n)), "realloc(NULL, >PTRDIFF_MAX)");
    errno = 0;
    expect_enomem(aligned_alloc(64, opaque(n)), "aligned_alloc(64, >PTRDIFF_MAX)");
    errno = 0;
    expect_enomem(memalign(4096, opaque(n)), "memalign(4096, >PTRDIFF_MAX)");
    errno = 0;
    expect_enomem(valloc(opaque(n)), "valloc(>PTRDIFF_MAX)");
    errno = 0;
    expect_enomem(pvalloc(opaque(n)), "pvalloc(>PTRDIFF_MAX)");
    errno = 0;
    expect_enomem(reallocarray(nullptr, opaque(n), 1), "reallocarray(NULL, >PTRDIFF_MAX, 1)");

    void* q = reinterpret_cast<void*>(0x1234);
    int r = posix_memalign(&q, 64, opaque(n));
    CHECK(r == ENOMEM, "posix_memalign(64, huge) returned %d, expected ENOMEM", r);
    CHECK(q == reinterpret_cast<void*>(0x1234), "posix_memalign ENOMEM modified *memptr (%p)", q);
  }
  // Multiplication overflow.
  const std::size_t pairs[][2] = {{std::size_t{1} << 33, std::size_t{1} << 33},
                                  {SIZE_MAX / 2, 3},
                                  {3, SIZE_MAX / 2},
                                  {SIZE_MAX, SIZE_MAX},
                                  {std::size_t{1} << 32, std::size_t{1} << 31}};  // == 2^63 > PTRDIFF_MAX
  for (const auto& pr : pairs) {
    errno = 0;
    expect_enomem(calloc(opaque(pr[0]), opaque(pr[1])), "calloc(n, m) overflow");
    errno = 0;
    expect_enomem(reallocarray(nullptr, opaque(pr[0]), opaque(pr[1])), "reallocarray(NULL, n, m) overflow");
  }
  // A failing realloc/reallocarray leaves the original block intact (small and large).
  for (std::size_t n : {std::size_t{100}, 2 * g_cutoff}) {
    void* p = xmalloc(n);
    lt::fill_pattern(p, n, 7);
    errno = 0;
    expect_enomem(realloc(opaque(p), opaque(SIZE_MAX - 100)), "realloc(p, huge)");
    CHECK(lt::find_pattern_mismatch(p, n, 7) == SIZE_MAX, "realloc failure damaged the block (n=%zu)", n);
    errno = 0;
    expect_enomem(reallocarray(opaque(p), opaque(std::size_t{1} << 40), opaque(std::size_t{1} << 40)),
                  "reallocarray(p, overflow)");
    CHECK(lt::find_pattern_mismatch(p, n, 7) == SIZE_MAX, "reallocarray failure damaged the block (n=%zu)", n);
    release(p);
  }
}

// ---------------------------------------------------------- free and errno
void test_free_errno() {
  for (std::size_t n : {std::size_t{0}, std::size_t{16}, std::size_t{5000}, g_cutoff, 4 * g_cutoff + 3}) {
    void* p = xmalloc(n);
    errno = 1234;
    free(p);
    CHECK(errno == 1234, "free(p[%zu]) changed errno to %d", n, errno);
  }
  errno = 777;
  free(opaque(static_cast<void*>(nullptr)));
  CHECK(errno == 777, "free(NULL) changed errno to %d", errno);
  // aligned blocks and the other allocation functions too
  void* q = nullptr;
  CHECK(posix_memalign(&q, 4096, 2 * g_cutoff) == 0);
  errno = 99;
  free(opaque(q));
  CHECK(errno == 99, "free(posix_memalign large) changed errno to %d", errno);
}

// -------------------------------------------------------- malloc_usable_size
void test_usable_size() {
  CHECK(malloc_usable_size(opaque(static_cast<void*>(nullptr))) == 0, "malloc_usable_size(NULL) != 0");
  const std::size_t c = g_cutoff;
  const std::size_t sizes[] = {0, 1, 15, 16, 17, 24, 100, 1000, 4095, 4096, 10000, 65536, 200000,
                               c / 2, c - 1, c, c + 1, MiB, MiB + 1, 5 * MiB + 3};
  for (std::size_t n : sizes) {
    auto* p = static_cast<unsigned char*>(xmalloc(n));
    const std::size_t us = malloc_usable_size(p);
    CHECK(us >= n, "malloc_usable_size(malloc(%zu)) = %zu", n, us);
    std::memset(p, 0xAB, us);  // all of it must be writable
    if (us) CHECK(p[us - 1] == 0xAB);
    release(p);
  }
}

// --------------------------------------------------------- calloc (large)
bool all_zero(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, b + i, n - i >= 8 ? 8 : n - i);
    if (n - i < 8) w &= (std::uint64_t{1} << (8 * (n - i))) - 1;
    if (w) return false;
  }
  return true;
}

void test_calloc_large() {
  const std::size_t c = g_cutoff;
  for (std::size_t n : {c, c + 7, 2 * c, 4 * MiB + 100}) {
    for (int round = 0; round < 6; ++round) {
      void* p = calloc(opaque(n), 1);
      CHECK(p != nullptr, "calloc(%zu) failed", n);
      CHECK(all_zero(p, n), "calloc(%zu, 1) round %d returned non-zero memory", n, round);
      std::memset(p, 0xFF, n);  // dirty it, then give it back: the next calloc must re-zero
      release(p);
      void* q = calloc(opaque(n / 8 + 1), 8);
      CHECK(q != nullptr && all_zero(q, (n / 8 + 1) * 8), "calloc(%zu, 8) round %d not zeroed", n / 8 + 1, round);
      std::memset(q, 0x7F, (n / 8 + 1) * 8);
      release(q);
    }
  }
  // small callocs after dirty frees
  for (int i = 0; i < 200; ++i) {
    std::size_t n = opaque(static_cast<std::size_t>(i * 53 % 5000 + 1));
    void* d = xmalloc(n);
    std::memset(d, 0xFF, n);
    release(d);
    void* z = calloc(n, 1);
    CHECK(z != nullptr && all_zero(z, n), "calloc(%zu) small not zero", n);
    release(z);
  }
}

// -------------------------------------------------- malloc_trim, mallinfo2
void test_trim_mallinfo() {
  void* p = xmalloc(3 * g_cutoff);
  void* s = xmalloc(100);
  release(p);
  int r = malloc_trim(0);
  CHECK(r == 0 || r == 1, "malloc_trim(0) returned %d", r);
  r = malloc_trim(1 * MiB);
  CHECK(r == 0 || r == 1, "malloc_trim(1M) returned %d", r);
  struct mallinfo2 mi = mallinfo2();
  (void)opaque(mi.arena);
  (void)opaque(mi.uordblks);
  // malloc_info: options other than 0 are refused with EINVAL as the
  // return value, errno untouched (glibc 2.36); 0 writes an XML document.
  char buf[4096] = {};
  FILE* f = fmemopen(buf, sizeof buf - 1, "w");
  CHECK(f != nullptr, "fmemopen");
  errno = 0;
  r = malloc_info(1, f);
  CHECK(r == EINVAL && errno == 0, "malloc_info(1) returned %d, errno %d", r, errno);
  r = malloc_info(0, f);
  std::fclose(f);
  CHECK(r == 0 && std::strncmp(buf, "<malloc version=", 16) == 0, "malloc_info(0) returned %d: %.40s", r, buf);
  release(s);
}

// What programs read mallinfo2 for, with glibc's meaning of each field
// (malloc.c's int_mallinfo), so that this also passes under glibc: the
// heap in use (uordblks: small blocks; hblks, hblkhd: mmapped, i.e. large,
// ones, live only), arena = uordblks + fordblks. Under lowtide uordblks was
// the large path's mapped bytes (0 with 4 MiB of small blocks live) and
// hblkhd kept a freed block's bytes while the reuse cache held them.
void test_mallinfo_in_use() {
  constexpr int kSmall = 4096;
  constexpr std::size_t kSmallSize = 1000;
  const std::size_t big = std::size_t{64} << 20;  // above glibc's largest mmap threshold (32 MiB)
  static void* blocks[kSmall];
  const struct mallinfo2 before = mallinfo2();
  CHECK(before.arena == before.uordblks + before.fordblks, "arena %zu != uordblks %zu + fordblks %zu",
        before.arena, before.uordblks, before.fordblks);
  for (void*& b : blocks) {
    b = xmalloc(kSmallSize);
    std::memset(b, 1, kSmallSize);
  }
  const struct mallinfo2 small = mallinfo2();
  const std::size_t grew = small.uordblks - before.uordblks;
  CHECK(small.uordblks >= before.uordblks && grew >= kSmall * kSmallSize && grew <= 2 * kSmall * kSmallSize,
        "uordblks grew by %zu for %d live blocks of %zu bytes", small.uordblks - before.uordblks, kSmall,
        kSmallSize);
  void* p = xmalloc(big);
  const struct mallinfo2 large = mallinfo2();
  CHECK(large.hblks == small.hblks + 1 && large.hblkhd >= small.hblkhd + big &&
            large.hblkhd <= small.hblkhd + big + (std::size_t{1} << 20),
        "a live %zu-byte block: hblks %zu -> %zu, hblkhd %zu -> %zu", big, small.hblks, large.hblks, small.hblkhd,
        large.hblkhd);
  release(p);
  const struct mallinfo2 freed = mallinfo2();
  CHECK(freed.hblks == small.hblks && freed.hblkhd == small.hblkhd,
        "the block freed: hblks %zu, hblkhd %zu, as before it (%zu, %zu)", freed.hblks, freed.hblkhd, small.hblks,
        small.hblkhd);
  for (void* b : blocks) release(b);
  const struct mallinfo2 after = mallinfo2();
  CHECK(small.uordblks - after.uordblks >= kSmall * kSmallSize,
        "uordblks fell by %zu when %d blocks of %zu bytes were freed", small.uordblks - after.uordblks, kSmall,
        kSmallSize);
  CHECK(after.arena == after.uordblks + after.fordblks, "arena %zu != uordblks %zu + fordblks %zu", after.arena,
        after.uordblks, after.fordblks);
}

// ------------------------------------------------------ cross-thread frees
struct Mailbox {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::pair<void*, std::size_t>> q;
};

// ------------------------------------------- the kernel's overcommit check
// A block larger than RAM + swap: the kernel's heuristic overcommit mode (0,
// the default) refuses an mmap that big, so glibc's malloc returns NULL.
// lowtide commits with MAP_NORESERVE, which skips that check, and must make
// it itself. Whatever the mode, malloc must refuse exactly what a plain
// private mapping of the same size is refused, and grant what it is granted.
bool kernel_grants(std::size_t n) {
  void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  munmap(m, n);
  return true;
}

void test_kernel_refusal(bool verbose) {
  struct sysinfo si {};
  CHECK(sysinfo(&si) == 0, "sysinfo: %s", std::strerror(errno));
  const std::size_t total = (static_cast<std::size_t>(si.totalram) + si.totalswap) * si.mem_unit;
  const std::size_t sizes[] = {total + (std::size_t{1} << 30), total / 2, std::size_t{2} << 40};
  for (std::size_t n : sizes) {
    const bool grants = kernel_grants(n);
    if (verbose) std::printf("  %-24s %zu MiB (RAM + swap %zu MiB): kernel %s\n", "kernel_refusal", n >> 20, total >> 20,
                             grants ? "grants" : "refuses");
    errno = 0;
    void* p = malloc(opaque(n));
    if (!grants) {
      expect_enomem(p, "malloc(> RAM + swap)");
      errno = 0;
      expect_enomem(calloc(1, opaque(n)), "calloc(> RAM + swap)");
      void* q = reinterpret_cast<void*>(0x1234);
      CHECK(posix_memalign(&q, 2 * MiB, opaque(n)) == ENOMEM, "posix_memalign(> RAM + swap) did not fail");
      void* b = xmalloc(2 * g_cutoff);
      lt::fill_pattern(b, 2 * g_cutoff, 9);
      errno = 0;
      expect_enomem(realloc(opaque(b), opaque(n)), "realloc(p, > RAM + swap)");
      CHECK(lt::find_pattern_mismatch(b, 2 * g_cutoff, 9) == SIZE_MAX, "a refused realloc damaged the block");
      release(b);
      continue;
    }
    CHECK(p != nullptr, "malloc(%zu) failed (%s) where the kernel maps that size", n, std::strerror(errno));
    static_cast<volatile char*>(p)[0] = 1;
    static_cast<volatile char*>(p)[n - 1] = 2;
    release(p);
  }
}

void test_cross_thread_frees() {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 160;
  const std::size_t c = g_cutoff;
  const std::size_t sizes[] = {8, 24, 200, 1000, 20000, 100 * KiB, c, c + 4096, 3 * c};
  std::vector<Mailbox> boxes(kThreads);
  std::atomic<int> failures{0};

  auto worker = [&](int id) {
    Mailbox& mine = boxes[static_cast<std::size_t>(id)];
    Mailbox& next = boxes[static_cast<std::size_t>((id + 1) % kThreads)];
    int received = 0;
    auto drain = [&](bool block) {
      std::unique_lock<std::mutex> lk(mine.m);
      if (block)
        if (!mine.cv.wait_for(lk, std::chrono::seconds(20), [&] { return !mine.q.empty(); })) {
          failures.fetch_add(1);
          std::fprintf(stderr, "cross-thread: thread %d timed out waiting for blocks\n", id);
          return false;
        }
      while (!mine.q.empty()) {
        auto [p, n] = mine.q.front();
        mine.q.pop_front();
        lk.unlock();
        const unsigned seed = static_cast<unsigned>(((id + kThreads - 1) % kThreads) * 1000);
        if (lt::find_pattern_mismatch(p, n, seed, 4096) != SIZE_MAX) {
          failures.fetch_add(1);
          std::fprintf(stderr, "cross-thread: block %p (%zu bytes) corrupted\n", p, n);
        }
        release(p);  // freed by a thread other than the allocating one
        ++received;
        lk.lock();
      }
      return true;
    };
    for (int i = 0; i < kPerThread; ++i) {
      const std::size_t n = sizes[static_cast<std::size_t>(i) % (sizeof sizes / sizeof sizes[0])];
      void* p = (i % 3 == 0) ? calloc(opaque(n), 1) : xmalloc(n);
      CHECK(p != nullptr);
      lt::fill_pattern(p, n, static_cast<unsigned>(id * 1000), 4096);
      {
        std::lock_guard<std::mutex> lk(next.m);
        next.q.emplace_back(p, n);
      }
      next.cv.notify_one();
      if (i % 8 == 7) drain(false);
    }
    while (received < kPerThread)
      if (!drain(true)) return;
  };
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) ts.emplace_back(worker, i);
  for (auto& t : ts) t.join();
  CHECK(failures.load() == 0, "cross-thread frees: %d failures (see above)", failures.load());
}

}  // namespace entry
