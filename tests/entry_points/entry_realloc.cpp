// realloc's semantics and transitions between the paths, realloc of a
// madvise-split block, reallocarray (entry_points.cpp runs them).
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

}  // namespace entry
