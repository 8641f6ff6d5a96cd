// Allocator entry points under glibc 2.36 semantics.
//
// Must pass under plain glibc (no preload) too: it documents the contract the
// shim has to keep. Checks that only make sense for lowtide (its extra exports,
// glibc bugs lowtide is expected not to copy) run only when LOWTIDE_TEST_LIB
// is set.
//
// The whole set runs once single-threaded (clear first failure), then from 4
// threads concurrently in a loop, bounded by iterations and wall time.

#include "lowtide_test.hpp"

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

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

constexpr std::size_t kHuge = static_cast<std::size_t>(PTRDIFF_MAX) + 1;  // > PTRDIFF_MAX
const std::size_t kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));

std::mutex g_new_handler_mutex;  // std::new_handler is process-global
bool g_lowtide = false;
std::size_t g_cutoff = lt::kDefaultCutoff;

void* xmalloc(std::size_t n) {
  void* p = malloc(opaque(n));
  CHECK(p != nullptr, "malloc(%zu) returned NULL", n);
  return opaque(p);
}

void release(void* p) { free(opaque(p)); }

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

// ------------------------------------------------------ realloc semantics
void test_realloc_semantics() {
  // realloc(NULL, n) is malloc(n)
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{100}, 2 * g_cutoff}) {
    void* p = realloc(nullptr, opaque(n));
    CHECK(p != nullptr, "realloc(NULL, %zu) returned NULL", n);
    CHECK(lt::aligned_to(p, 16), "realloc(NULL, %zu) not aligned", n);
    CHECK(malloc_usable_size(p) >= n, "realloc(NULL, %zu): usable %zu", n, malloc_usable_size(p));
    if (n) std::memset(p, 0xCD, n);
    release(p);
  }
  // realloc(p, 0) frees and returns NULL, errno untouched (glibc 2.36).
  for (std::size_t n : {std::size_t{1}, std::size_t{100}, 64 * KiB, g_cutoff, 3 * g_cutoff}) {
    void* p = xmalloc(n);
    errno = 4242;
    void* r = realloc(p, opaque(std::size_t{0}));
    const int e = errno;
    CHECK(r == nullptr, "realloc(p[%zu], 0) returned %p, expected NULL", n, r);
    CHECK(e == 4242, "realloc(p[%zu], 0) changed errno to %d", n, e);
  }
  // Same size / shrink / grow in place keep contents.
  void* p = xmalloc(1000);
  lt::fill_pattern(p, 1000, 3);
  p = realloc(p, 1000);
  CHECK(p != nullptr && lt::find_pattern_mismatch(p, 1000, 3) == SIZE_MAX, "realloc same size lost data");
  p = realloc(p, 10);
  CHECK(p != nullptr && lt::find_pattern_mismatch(p, 10, 3) == SIZE_MAX, "realloc shrink lost data");
  release(p);
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

// ----------------------------------------------------------- aligned_alloc
void test_aligned_alloc() {
  // glibc 2.36: aligned_alloc == memalign, any alignment accepted and rounded
  // up to a power of two (at least MALLOC_ALIGNMENT); size need not be a multiple.
  struct Case { std::size_t align, size, expect_align; };
  const Case cases[] = {{3, 10, 16},      {0, 10, 16},      {1, 1, 16},         {24, 5, 32},
                        {64, 10, 64},     {64, 65, 64},     {4096, 1, 4096},    {100, 1000, 128},
                        {32, 0, 32},      {8192, 3, 8192}};
  for (const Case& c : cases) {
    errno = 0;
    void* p = aligned_alloc(opaque(c.align), opaque(c.size));
    CHECK(p != nullptr, "aligned_alloc(%zu, %zu) returned NULL (errno %d)", c.align, c.size, errno);
    CHECK(lt::aligned_to(p, c.expect_align), "aligned_alloc(%zu, %zu) = %p not %zu-aligned", c.align, c.size, p,
          c.expect_align);
    CHECK(malloc_usable_size(p) >= c.size);
    if (c.size) std::memset(p, 0xEE, c.size);
    release(p);
  }
  // Alignment above 2^63 cannot be a power of two that fits: EINVAL.
  const std::size_t bad[] = {(std::size_t{1} << 63) + 1, SIZE_MAX, (std::size_t{1} << 63) + (std::size_t{1} << 62)};
  for (std::size_t a : bad) {
    errno = 0;
    void* p = aligned_alloc(opaque(a), 10);
    const int e = errno;
    CHECK(p == nullptr, "aligned_alloc(%#zx, 10) returned %p", a, p);
    CHECK(e == EINVAL, "aligned_alloc(%#zx, 10): errno %d, expected EINVAL", a, e);
    errno = 0;
    p = memalign(opaque(a), 10);
    CHECK(p == nullptr && errno == EINVAL, "memalign(%#zx, 10): p=%p errno=%d, expected NULL/EINVAL", a, p, errno);
  }
}

// ------------------------------------------------------------------ memalign
void test_memalign() {
  struct Case { std::size_t align, expect; };
  const Case cases[] = {{0, 16},    {1, 16},       {2, 16},         {17, 32},          {48, 64},
                        {96, 128},  {1000, 1024},  {3000, 4096},    {4097, 8192},      {65536, 65536},
                        {100000, 131072}};
  for (const Case& c : cases) {
    for (std::size_t size : {std::size_t{1}, std::size_t{100}, std::size_t{5000}}) {
      void* p = memalign(opaque(c.align), opaque(size));
      CHECK(p != nullptr, "memalign(%zu, %zu) returned NULL", c.align, size);
      CHECK(lt::aligned_to(p, c.expect), "memalign(%zu, %zu) = %p not rounded up to %zu", c.align, size, p, c.expect);
      CHECK(malloc_usable_size(p) >= size);
      std::memset(p, 0x11, size);
      release(p);
    }
  }
}

// ------------------------------------------------------------ posix_memalign
void test_posix_memalign() {
  const std::size_t bad[] = {0, 1, 2, 4, 3, 12, 24, 48, 4095, 4097, SIZE_MAX, (std::size_t{1} << 63) + 8};
  for (std::size_t a : bad) {
    void* q = reinterpret_cast<void*>(0x4321);
    errno = 555;
    int r = posix_memalign(&q, opaque(a), 10);
    CHECK(r == EINVAL, "posix_memalign(align=%zu) returned %d, expected EINVAL", a, r);
    CHECK(q == reinterpret_cast<void*>(0x4321), "posix_memalign(align=%zu) modified *memptr on EINVAL", a);
    CHECK(errno == 555, "posix_memalign(align=%zu) changed errno to %d", a, errno);
  }
  for (std::size_t a : {std::size_t{8}, std::size_t{16}, std::size_t{32}, std::size_t{256}, std::size_t{4096},
                        std::size_t{1} << 16, std::size_t{1} << 20}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{4096}, std::size_t{70000}}) {
      void* q = nullptr;
      errno = 321;
      int r = posix_memalign(&q, opaque(a), opaque(n));
      CHECK(r == 0 && q != nullptr, "posix_memalign(%zu, %zu) failed: %d", a, n, r);
      CHECK(errno == 321, "posix_memalign success changed errno");
      CHECK(lt::aligned_to(q, a), "posix_memalign(%zu, %zu) = %p misaligned", a, n, q);
      if (n) std::memset(q, 0x22, n);
      release(q);
    }
  }
}

// ----------------------------------------------------------- valloc/pvalloc
void test_valloc() {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{4096}, std::size_t{4097},
                        std::size_t{12345}, g_cutoff + 1}) {
    void* p = valloc(opaque(n));
    CHECK(p != nullptr, "valloc(%zu) returned NULL", n);
    CHECK(lt::aligned_to(p, kPage), "valloc(%zu) = %p not page aligned", n, p);
    CHECK(malloc_usable_size(p) >= n);
    if (n) std::memset(p, 0x33, n);
    release(p);

    void* q = pvalloc(opaque(n));
    CHECK(q != nullptr, "pvalloc(%zu) returned NULL", n);
    CHECK(lt::aligned_to(q, kPage), "pvalloc(%zu) = %p not page aligned", n, q);
    const std::size_t rounded = (n + kPage - 1) / kPage * kPage;
    const std::size_t us = malloc_usable_size(q);
    // glibc 2.36 rounds with `& -(pagesize - 1)` (a bug): pvalloc(0) gets a
    // 1-byte request. The documented behaviour -- one whole page -- is what
    // lowtide must give, so that exact case is only asserted under lowtide.
    if (n != 0 || g_lowtide) {
      const std::size_t want = n == 0 ? kPage : rounded;
      CHECK(us >= want, "pvalloc(%zu): malloc_usable_size %zu < %zu (whole pages)", n, us, want);
      std::memset(q, 0x44, want);  // the whole rounded size must be writable
    }
    release(q);
  }
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

// ------------------------------------------------------ operator new failure
int g_handler_calls = 0;
int g_handler_limit = 0;
void counting_handler() {
  if (++g_handler_calls >= g_handler_limit) std::set_new_handler(nullptr);
}

void test_operator_new_failure() {
  std::lock_guard<std::mutex> lock(g_new_handler_mutex);
  const std::size_t huge = opaque(SIZE_MAX - 2 * MiB);
  // libstdc++ 12's own aligned operator new computes (n + align - 1) & ~(align - 1)
  // without an overflow check, so new[](SIZE_MAX - 4096, align 1 MiB) "succeeds"
  // with a tiny block under plain glibc. lowtide replaces operator new and must
  // get it right, so that size is only tried under lowtide.
  std::vector<std::size_t> huge_sizes = {huge, kHuge};
  if (g_lowtide) huge_sizes.push_back(opaque(SIZE_MAX - 4096));

  struct Form {
    const char* name;
    void* (*call)(std::size_t);
    bool nothrow;
  };
  const Form forms[] = {
      {"new(n)", [](std::size_t n) { return ::operator new(n); }, false},
      {"new[](n)", [](std::size_t n) { return ::operator new[](n); }, false},
      {"new(n, align 64)", [](std::size_t n) { return ::operator new(n, std::align_val_t{64}); }, false},
      {"new[](n, align 4096)", [](std::size_t n) { return ::operator new[](n, std::align_val_t{4096}); }, false},
      {"new(n, nothrow)", [](std::size_t n) { return ::operator new(n, std::nothrow); }, true},
      {"new[](n, nothrow)", [](std::size_t n) { return ::operator new[](n, std::nothrow); }, true},
      {"new(n, align 64, nothrow)",
       [](std::size_t n) { return ::operator new(n, std::align_val_t{64}, std::nothrow); }, true},
      {"new[](n, align 1M, nothrow)",
       [](std::size_t n) { return ::operator new[](n, std::align_val_t{MiB}, std::nothrow); }, true},
  };
  for (const Form& f : forms) {
    for (std::size_t n : huge_sizes) {
      // 1) handler installed: called, allocation retried, handler uninstalls
      //    itself on the 3rd call, then bad_alloc (or NULL for nothrow).
      g_handler_calls = 0;
      g_handler_limit = 3;
      std::set_new_handler(counting_handler);
      bool threw = false;
      void* p = reinterpret_cast<void*>(1);
      try {
        p = f.call(n);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      std::set_new_handler(nullptr);
      CHECK(g_handler_calls == 3, "%s: new_handler called %d times, expected 3", f.name, g_handler_calls);
      if (f.nothrow) {
        CHECK(!threw && p == nullptr, "%s: expected NULL after handler gave up (threw=%d p=%p)", f.name, threw, p);
      } else {
        CHECK(threw, "%s: expected std::bad_alloc", f.name);
      }

      // 2) no handler: bad_alloc straight away / NULL.
      threw = false;
      p = reinterpret_cast<void*>(1);
      try {
        p = f.call(n);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      if (f.nothrow)
        CHECK(!threw && p == nullptr, "%s without handler: threw=%d p=%p", f.name, threw, p);
      else
        CHECK(threw, "%s without handler: no bad_alloc", f.name);
    }
  }

  // 3) A handler that throws its own exception: it must propagate from the
  //    throwing forms (the handler may throw bad_alloc-derived types only, so
  //    use one).
  struct MyBadAlloc : std::bad_alloc {};
  std::set_new_handler([] { throw MyBadAlloc(); });
  bool mine = false;
  try {
    void* p = ::operator new(huge);
    ::operator delete(p);
  } catch (const MyBadAlloc&) {
    mine = true;
  } catch (...) {
  }
  std::set_new_handler(nullptr);
  CHECK(mine, "exception thrown by new_handler did not propagate out of operator new");
}

// ------------------------------------------------- all 20 new/delete forms
void test_new_delete_forms() {
  const std::size_t sizes[] = {1, 24, 1000, 100 * KiB, g_cutoff, 2 * g_cutoff + 10};
  const std::size_t aligns[] = {16, 64, 4096, 2 * MiB};
  auto touch = [](void* p, std::size_t n) {
    CHECK(p != nullptr);
    static_cast<unsigned char*>(p)[0] = 0x5A;
    static_cast<unsigned char*>(p)[n - 1] = 0xA5;
    return opaque(p);
  };
  const std::nothrow_t& nt = std::nothrow;
  for (std::size_t n : sizes) {
    n = opaque(n);
    void* p;
    p = touch(::operator new(n), n);           ::operator delete(p);              // 1 / d1
    p = touch(::operator new[](n), n);         ::operator delete[](p);            // 2 / d2
    p = touch(::operator new(n, nt), n);       ::operator delete(p, nt);          // 3 / d3
    p = touch(::operator new[](n, nt), n);     ::operator delete[](p, nt);        // 4 / d4
    p = touch(::operator new(n), n);           ::operator delete(p, n);           // d5 sized
    p = touch(::operator new[](n), n);         ::operator delete[](p, n);         // d6 sized array
    p = touch(::operator new(n, nt), n);       ::operator delete(p);
    p = touch(::operator new[](n, nt), n);     ::operator delete[](p, n);
    for (std::size_t a : aligns) {
      const std::align_val_t al{a};
      auto chk = [&](void* q, const char* what) {
        CHECK(lt::aligned_to(q, a), "%s(%zu, align %zu) = %p misaligned", what, n, a, q);
        return touch(q, n);
      };
      p = chk(::operator new(n, al), "new");               ::operator delete(p, al);          // 5 / d7
      p = chk(::operator new[](n, al), "new[]");           ::operator delete[](p, al);        // 6 / d8
      p = chk(::operator new(n, al), "new");               ::operator delete(p, n, al);       // d9
      p = chk(::operator new[](n, al), "new[]");           ::operator delete[](p, n, al);     // d10
      p = chk(::operator new(n, al, nt), "new nothrow");   ::operator delete(p, al, nt);      // 7 / d11
      p = chk(::operator new[](n, al, nt), "new[] nothrow"); ::operator delete[](p, al, nt);  // 8 / d12
    }
  }
  // delete of nullptr through every form is a no-op.
  auto np = [] { return opaque(static_cast<void*>(nullptr)); };
  ::operator delete(np());
  ::operator delete[](np());
  ::operator delete(np(), std::nothrow);
  ::operator delete[](np(), std::nothrow);
  ::operator delete(np(), std::size_t{8});
  ::operator delete[](np(), std::size_t{8});
  ::operator delete(np(), std::align_val_t{64});
  ::operator delete[](np(), std::align_val_t{64});
  ::operator delete(np(), std::size_t{8}, std::align_val_t{64});
  ::operator delete[](np(), std::size_t{8}, std::align_val_t{64});
  ::operator delete(np(), std::align_val_t{64}, std::nothrow);
  ::operator delete[](np(), std::align_val_t{64}, std::nothrow);

  // new-expressions of over-aligned types (compiler picks the align_val_t +
  // sized forms), and of std containers.
  struct alignas(256) Over {
    unsigned char b[300];
  };
  for (int k : {1, 10, 5000}) {
    Over* arr = opaque(new Over[static_cast<std::size_t>(k)]);
    CHECK(lt::aligned_to(arr, 256), "new Over[%d] misaligned", k);
    arr[k - 1].b[299] = 1;
    delete[] arr;
    Over* one = opaque(new Over);
    CHECK(lt::aligned_to(one, 256), "new Over misaligned");
    delete one;
  }
  std::vector<std::string> v;
  for (int i = 0; i < 200; ++i) v.emplace_back(static_cast<std::size_t>(i * 37 % 300), 'x');
  std::vector<char> bigv(opaque(3 * g_cutoff), 'y');
  CHECK(bigv[bigv.size() - 1] == 'y');
}

// ----------------------------------------- large aligned allocations
void test_large_aligned() {
  const std::size_t c = g_cutoff;
  // Tiny/zero-size requests with a big alignment, each followed by a large
  // block that may land right after it; freeing the neighbour first and the
  // aligned block second must both work (the aligned block's bookkeeping must
  // not be shared with, or overwritten by, its neighbour's).
  for (std::size_t a : {128 * KiB, MiB, 4 * MiB}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{64}}) {
      void* q = nullptr;
      CHECK(posix_memalign(&q, opaque(a), opaque(n)) == 0 && lt::aligned_to(q, a), "posix_memalign(%zu, %zu)", a, n);
      void* m = memalign(opaque(a), opaque(n));
      CHECK(m != nullptr && lt::aligned_to(m, a), "memalign(%zu, %zu)", a, n);
      void* l = xmalloc(3 * c);
      static_cast<unsigned char*>(l)[0] = 1;
      CHECK(malloc_usable_size(q) >= n && malloc_usable_size(m) >= n);
      if (n) std::memset(q, 0x66, n);
      release(l);
      release(q);
      release(m);
    }
  }
  const std::size_t sizes[] = {c, c + 1, 3 * c + 12345};
  for (std::size_t a = 16; a <= 64 * MiB; a <<= 1) {
    for (std::size_t n : sizes) {
      n = opaque(n);
      void* q = nullptr;
      int r = posix_memalign(&q, opaque(a), n);
      CHECK(r == 0 && q != nullptr, "posix_memalign(%zu, %zu) failed: %d", a, n, r);
      CHECK(lt::aligned_to(q, a), "posix_memalign(%zu, %zu) = %p misaligned", a, n, q);
      CHECK(malloc_usable_size(q) >= n, "posix_memalign(%zu, %zu): usable %zu", a, n, malloc_usable_size(q));
      lt::fill_pattern(q, n, static_cast<unsigned>(a));
      CHECK(lt::find_pattern_mismatch(q, n, static_cast<unsigned>(a)) == SIZE_MAX);

      void* b = aligned_alloc(opaque(a), n);
      CHECK(b != nullptr && lt::aligned_to(b, a), "aligned_alloc(%zu, %zu) = %p", a, n, b);
      static_cast<unsigned char*>(b)[n - 1] = 1;

      void* m = memalign(opaque(a), n);
      CHECK(m != nullptr && lt::aligned_to(m, a), "memalign(%zu, %zu) = %p", a, n, m);
      static_cast<unsigned char*>(m)[n - 1] = 1;

      void* o = ::operator new(n, std::align_val_t{a});
      CHECK(lt::aligned_to(o, a), "operator new(%zu, align %zu) = %p", n, a, o);
      static_cast<unsigned char*>(o)[n - 1] = 1;

      // realloc of an aligned large block keeps the data (alignment need not be kept).
      void* g = realloc(opaque(q), n * 2);
      CHECK(g != nullptr, "realloc of aligned large block failed");
      CHECK(lt::find_prefix_mismatch(g, n, n, static_cast<unsigned>(a)) == SIZE_MAX,
            "realloc of posix_memalign(%zu, %zu) block lost data", a, n);

      release(g);
      release(b);
      release(m);
      ::operator delete(o, n, std::align_val_t{a});
    }
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

// ------------------------------------------------ realloc transitions
void test_realloc_transitions() {
  const std::size_t c = g_cutoff;
  // small -> large -> larger -> smaller -> (hysteresis: still large) -> small -> tiny -> large
  const std::size_t steps[] = {100, 2 * c, 8 * c, 3 * c, c * 600 / 1024, c * 100 / 1024, 100, 40,
                               c,   c - 1, c / 2 - 1, c / 2 + 1, 5 * c, 7};
  void* p = xmalloc(steps[0]);
  lt::fill_pattern(p, steps[0], 0);
  std::size_t old = steps[0];
  unsigned seed = 0;
  for (std::size_t i = 1; i < sizeof steps / sizeof steps[0]; ++i) {
    const std::size_t n = opaque(steps[i]);
    void* q = realloc(p, n);
    CHECK(q != nullptr, "realloc(%zu -> %zu) failed", old, n);
    CHECK(lt::aligned_to(q, 16), "realloc(%zu -> %zu) misaligned %p", old, n, q);
    CHECK(malloc_usable_size(q) >= n, "realloc(%zu -> %zu): usable %zu", old, n, malloc_usable_size(q));
    const std::size_t keep = std::min(old, n);
    const std::size_t bad = lt::find_prefix_mismatch(q, old, keep, seed);
    CHECK(bad == SIZE_MAX, "realloc(%zu -> %zu) lost data at offset %zu (got %#x, want %#x)", old, n, bad,
          static_cast<unsigned char*>(q)[bad], lt::pattern_byte(bad, seed));
    ++seed;
    lt::fill_pattern(q, n, seed);
    p = q;
    old = n;
  }
  release(p);

  // realloc growth of a large block many times in small steps (in-place growth path)
  std::size_t n = c;
  p = xmalloc(n);
  lt::fill_pattern(p, n, 99);
  for (int i = 0; i < 20; ++i) {
    const std::size_t nn = n + 4096 * static_cast<std::size_t>(i + 1) + 13;
    void* q = realloc(p, opaque(nn));
    CHECK(q != nullptr);
    CHECK(lt::find_prefix_mismatch(q, n, n, 99 + static_cast<unsigned>(i)) == SIZE_MAX,
          "stepwise large realloc %zu -> %zu lost data", n, nn);
    lt::fill_pattern(q, nn, 100 + static_cast<unsigned>(i));
    p = q;
    n = nn;
  }
  release(p);
}

// ------------------------------------ realloc of a madvise-split block
int count_vmas(const void* lo, const void* hi) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[512];
  int count = 0;
  const auto l = reinterpret_cast<std::uintptr_t>(lo), h = reinterpret_cast<std::uintptr_t>(hi);
  while (std::fgets(line, sizeof line, f)) {
    unsigned long a = 0, b = 0;
    if (std::sscanf(line, "%lx-%lx", &a, &b) == 2 && a < h && b > l) ++count;
  }
  std::fclose(f);
  return count;
}

void test_madvise_split_realloc(bool verbose) {
  for (std::size_t target : {32 * MiB, 4 * MiB, 16 * MiB}) {
    const std::size_t n = 8 * MiB;
    auto* p = static_cast<unsigned char*>(xmalloc(n));
    // numpy does this: madvise(MADV_HUGEPAGE) on the page-aligned part of its
    // buffer. The kernel splits the mapping into several VMAs.
    auto base = reinterpret_cast<std::uintptr_t>(p);
    std::uintptr_t a = (base + 512 * KiB + 2 * MiB - 1) & ~(2 * MiB - 1);
    const std::size_t len = 2 * MiB;
    int rc = madvise(reinterpret_cast<void*>(a), len, MADV_HUGEPAGE);
    // Another, different advice further up: three or more VMAs in total.
    std::uintptr_t a2 = (base + 5 * MiB) & ~(kPage - 1);
    int rc2 = madvise(reinterpret_cast<void*>(a2), 1 * MiB, MADV_NOHUGEPAGE);
    if (rc != 0 || rc2 != 0) {
      // Kernel without THP: MADV_DONTDUMP splits VMAs just the same.
      rc = madvise(reinterpret_cast<void*>(a), len, MADV_DONTDUMP);
      CHECK(rc == 0, "madvise(MADV_DONTDUMP) failed: %s", std::strerror(errno));
    }
    const int vmas = count_vmas(p, p + n);
    if (verbose) std::printf("madvise split: block %p..%p spans %d VMAs\n", static_cast<void*>(p),
                             static_cast<void*>(p + n), vmas);
    CHECK(vmas >= 2, "madvise did not split the mapping (VMAs=%d): test precondition", vmas);
    lt::fill_pattern(p, n, 42);
    void* q = realloc(p, opaque(target));
    CHECK(q != nullptr, "realloc of madvise-split 8 MiB block to %zu failed", target);
    const std::size_t keep = std::min(n, target);
    const std::size_t bad = lt::find_prefix_mismatch(q, n, keep, 42);
    CHECK(bad == SIZE_MAX, "realloc of madvise-split block 8 MiB -> %zu lost data at offset %zu", target, bad);
    std::memset(static_cast<unsigned char*>(q) + keep - 1, 1, 1);
    static_cast<unsigned char*>(q)[target - 1] = 2;
    release(q);
  }
  // Freeing a split block (no realloc) must work too.
  auto* p = static_cast<unsigned char*>(xmalloc(8 * MiB));
  auto base = reinterpret_cast<std::uintptr_t>(p);
  (void)madvise(reinterpret_cast<void*>((base + MiB) & ~(kPage - 1)), MiB, MADV_DONTDUMP);
  p[8 * MiB - 1] = 1;
  release(p);
}

// ---------------------------------------------------------- reallocarray
void test_reallocarray() {
  auto* p = static_cast<std::uint32_t*>(reallocarray(nullptr, opaque(std::size_t{10}), sizeof(std::uint32_t)));
  CHECK(p != nullptr);
  for (std::uint32_t i = 0; i < 10; ++i) p[i] = i * 3;
  p = static_cast<std::uint32_t*>(reallocarray(p, opaque(g_cutoff), sizeof(std::uint32_t)));  // -> large
  CHECK(p != nullptr);
  for (std::uint32_t i = 0; i < 10; ++i) CHECK(p[i] == i * 3, "reallocarray lost data");
  p[g_cutoff - 1] = 77;
  p = static_cast<std::uint32_t*>(reallocarray(p, opaque(std::size_t{5}), sizeof(std::uint32_t)));  // -> small
  CHECK(p != nullptr);
  for (std::uint32_t i = 0; i < 5; ++i) CHECK(p[i] == i * 3, "reallocarray shrink lost data");
  errno = 0;
  void* r = reallocarray(opaque(p), opaque(SIZE_MAX / 2), 4);
  CHECK(r == nullptr && errno == ENOMEM, "reallocarray overflow: %p errno %d", r, errno);
  for (std::uint32_t i = 0; i < 5; ++i) CHECK(p[i] == i * 3, "failed reallocarray damaged block");
  release(p);
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
  release(s);
}

// ------------------------------------------ lowtide / mimalloc extra exports
void test_extra_exports() {
  using malloc_size_t = std::size_t (*)(const void*);
  using good_size_t = std::size_t (*)(std::size_t);
  using reallocf_t = void* (*)(void*, std::size_t);
  using reallocarr_t = int (*)(void*, std::size_t, std::size_t);
  using vfree_t = void (*)(void*);
  using aligned_malloc_t = void* (*)(std::size_t, std::size_t);

  auto sym = [](const char* name) {
    void* s = dlsym(RTLD_DEFAULT, name);
    CHECK(s != nullptr, "extra export %s not found with dlsym(RTLD_DEFAULT)", name);
    return s;
  };
  auto f_malloc_size = reinterpret_cast<malloc_size_t>(sym("malloc_size"));
  auto f_good_size = reinterpret_cast<good_size_t>(sym("malloc_good_size"));
  auto f_reallocf = reinterpret_cast<reallocf_t>(sym("reallocf"));
  auto f_reallocarr = reinterpret_cast<reallocarr_t>(sym("reallocarr"));
  auto f_vfree = reinterpret_cast<vfree_t>(sym("vfree"));
  auto f_aligned_malloc = reinterpret_cast<aligned_malloc_t>(sym("_aligned_malloc"));

  for (std::size_t n : {std::size_t{1}, std::size_t{100}, std::size_t{5000}, g_cutoff, 3 * g_cutoff + 1}) {
    void* p = xmalloc(n);
    CHECK(f_malloc_size(p) >= n, "malloc_size(malloc(%zu)) = %zu", n, f_malloc_size(p));
    CHECK(f_malloc_size(p) == malloc_usable_size(p), "malloc_size != malloc_usable_size for %zu", n);
    release(p);
    CHECK(f_good_size(n) >= n, "malloc_good_size(%zu) = %zu", n, f_good_size(n));
  }

  // reallocf: like realloc, but frees the block on failure.
  for (std::size_t n : {std::size_t{64}, 2 * g_cutoff}) {
    void* p = xmalloc(n);
    lt::fill_pattern(p, n, 5);
    void* q = f_reallocf(p, opaque(n * 2));
    CHECK(q != nullptr && lt::find_prefix_mismatch(q, n, n, 5) == SIZE_MAX, "reallocf(%zu -> %zu) lost data", n,
          n * 2);
    errno = 0;
    void* r = f_reallocf(q, opaque(SIZE_MAX - 10));
    CHECK(r == nullptr && errno == ENOMEM, "reallocf(huge) = %p errno %d", r, errno);
    // q has been freed by reallocf; not touched again (death.cpp checks it was).
  }

  // reallocarr(void* pptr, n, size): returns 0 or an errno value.
  void* arr = nullptr;
  int rc = f_reallocarr(&arr, opaque(std::size_t{100}), 8);
  CHECK(rc == 0 && arr != nullptr, "reallocarr(&NULL, 100, 8) = %d", rc);
  lt::fill_pattern(arr, 800, 9);
  rc = f_reallocarr(&arr, opaque(g_cutoff), 4);
  CHECK(rc == 0 && arr != nullptr && lt::find_pattern_mismatch(arr, 800, 9) == SIZE_MAX,
        "reallocarr grow to large: rc %d", rc);
  void* before = arr;
  rc = f_reallocarr(&arr, opaque(SIZE_MAX / 2), 4);
  CHECK(rc != 0, "reallocarr overflow returned 0");
  CHECK(arr == before, "reallocarr failure modified *pptr");
  CHECK(lt::find_pattern_mismatch(arr, 800, 9) == SIZE_MAX, "reallocarr failure damaged block");
  rc = f_reallocarr(&arr, opaque(std::size_t{10}), 8);
  CHECK(rc == 0 && arr != nullptr && lt::find_pattern_mismatch(arr, 80, 9) == SIZE_MAX, "reallocarr shrink: %d", rc);
  release(arr);

  for (std::size_t n : {std::size_t{10}, 3 * g_cutoff}) f_vfree(xmalloc(n));

  for (std::size_t a : {std::size_t{16}, std::size_t{64}, std::size_t{4096}, std::size_t{1} << 21}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, g_cutoff, 2 * g_cutoff + 3}) {
      void* p = f_aligned_malloc(opaque(n), opaque(a));
      CHECK(p != nullptr && lt::aligned_to(p, a), "_aligned_malloc(%zu, %zu) = %p", n, a, p);
      static_cast<unsigned char*>(p)[n - 1] = 1;
      release(p);
    }
  }
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

// ------------------------------------------------------------------ driver
struct Test {
  const char* name;
  void (*fn)();
};

const Test kTests[] = {
    {"alignment", test_alignment},
    {"malloc_zero", test_malloc_zero},
    {"overflow", test_overflow},
    {"realloc_semantics", test_realloc_semantics},
    {"free_errno", test_free_errno},
    {"aligned_alloc", test_aligned_alloc},
    {"memalign", test_memalign},
    {"posix_memalign", test_posix_memalign},
    {"valloc_pvalloc", test_valloc},
    {"usable_size", test_usable_size},
    {"operator_new_failure", test_operator_new_failure},
    {"new_delete_forms", test_new_delete_forms},
    {"large_aligned", test_large_aligned},
    {"calloc_large", test_calloc_large},
    {"realloc_transitions", test_realloc_transitions},
    {"madvise_split_realloc", [] { test_madvise_split_realloc(false); }},
    {"reallocarray", test_reallocarray},
    {"trim_mallinfo", test_trim_mallinfo},
    {"cross_thread_frees", test_cross_thread_frees},
};

}  // namespace

int main() {
  lt::arm_watchdog(150, "entry_points");
  g_lowtide = lt::under_lowtide();
  g_cutoff = lt::cutoff();
  std::printf("entry_points: %s, cutoff %zu\n", g_lowtide ? "lowtide checks on" : "plain semantics only", g_cutoff);

  // Pass 1: single-threaded, one line per test so a failure is easy to place.
  for (const Test& t : kTests) {
    std::printf("  %-24s ", t.name);
    std::fflush(stdout);
    t.fn();
    std::printf("ok\n");
  }
  test_madvise_split_realloc(true);
  test_kernel_refusal(true);
  if (g_lowtide) {
    std::printf("  %-24s ", "extra_exports");
    std::fflush(stdout);
    test_extra_exports();
    std::printf("ok\n");
  }

  // Pass 2: the whole set from 4 threads concurrently, bounded.
  constexpr int kWorkers = 4;
  constexpr int kMaxRounds = 12;
  constexpr double kMaxSeconds = 25.0;
  const double deadline = lt::now_seconds() + kMaxSeconds;
  std::atomic<int> rounds_done{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      for (int round = 0; round < kMaxRounds && lt::now_seconds() < deadline; ++round) {
        for (std::size_t i = 0; i < sizeof kTests / sizeof kTests[0]; ++i) {
          // rotate the order per worker so different tests overlap
          const Test& t = kTests[(i + static_cast<std::size_t>(w) * 5) % (sizeof kTests / sizeof kTests[0])];
          t.fn();
        }
        if (g_lowtide) test_extra_exports();
        rounds_done.fetch_add(1);
      }
    });
  }
  for (auto& t : workers) t.join();
  std::printf("concurrent: %d rounds over %d threads ok\n", rounds_done.load(), kWorkers);
  CHECK(rounds_done.load() >= kWorkers, "concurrent phase did not complete a single round per thread");
  std::printf("PASS entry_points\n");
  return 0;
}
