// Issue 13, item 5: huge alignments. Every aligned entry point, at 2^k for
// k = 0..63 and at the odd alignments glibc treats specially, must give
// glibc 2.36's answer: a pointer aligned as asked, or NULL with the errno
// glibc sets. A refused request must change nothing (the large-block cache
// keeps what it holds, no bytes are counted as handed out) and must not warn
// "the range is full".
//
// What glibc 2.36 does here (checked without the preload, this machine,
// 23 GiB RAM, no swap, vm.overcommit_memory 0):
// * memalign, aligned_alloc, posix_memalign with a power of two >= 2^k ask
//   for n + align + MINSIZE bytes: granted up to 2^34, NULL + ENOMEM from
//   2^35 on, because that one mapping is more than RAM + swap. So the answer
//   is the kernel's for a plain private mapping of that size, which is what
//   expected_grant() asks the kernel. From 2^47 on it is NULL + ENOMEM on
//   any machine (the mapping is larger than the user address space).
// * libstdc++'s aligned operator new rounds the size up to a multiple of the
//   alignment first: NULL from 2^34 here (n = 1 becomes 2^34, + 2^34).
// * posix_memalign: EINVAL (returned, errno untouched) unless the alignment
//   is a power of two times sizeof(void*): 0, 1, 2, 4, 3, 24, 48, 100, ...
// * memalign and aligned_alloc (2.36 does not check aligned_alloc's
//   alignment): 0 and below 16 as malloc, a non-power-of-two rounded up;
//   above 2^63 (no power of two to round to) NULL + EINVAL; 2^62 + 1 rounds
//   to 2^63, NULL + ENOMEM.
#include "../lowtide_test.hpp"

#include <cinttypes>
#include <initializer_list>
#include <new>

#include <malloc.h>
#include <sys/mman.h>

#include "../lowtide_stats.hpp"

namespace {

using lt::opaque;

lowtide_stats stats() { return lt::read_stats(); }

// --- stderr of the calls under test, kept apart from the test's own --------
// fd 2 goes to a memfd while an allocation call runs; what lands there is
// searched for the false warning. The test's own messages (CHECK) go to the
// real stderr.
int g_capture = -1;
int g_real_stderr = -1;
char g_seen[1 << 16];
std::size_t g_seen_len = 0;

void capture_begin() {
  CHECK(dup2(g_capture, 2) == 2, "dup2: %s", std::strerror(errno));
}
void capture_end() {
  CHECK(dup2(g_real_stderr, 2) == 2, "dup2: %s", std::strerror(errno));
}
void read_captured() {
  CHECK(lseek(g_capture, 0, SEEK_SET) == 0);
  ssize_t r = read(g_capture, g_seen, sizeof g_seen - 1);
  CHECK(r >= 0, "read: %s", std::strerror(errno));
  g_seen_len = static_cast<std::size_t>(r);
  g_seen[g_seen_len] = '\0';
  CHECK(lseek(g_capture, 0, SEEK_END) >= 0);
}

// --- the expected answer -----------------------------------------------------
bool g_heuristic = false;  // vm.overcommit_memory == 0: glibc's answer is known

// Would the kernel map `len` bytes of accounted private memory? That is
// what glibc's memalign needs for a huge alignment (one mmap, or brk, both
// accounted), so it is glibc's answer.
bool kernel_maps(std::size_t len) {
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  munmap(m, len);
  return true;
}

// glibc's footprint for an aligned request of n bytes (see the top).
bool expected_grant(std::size_t n, std::size_t align, bool libstdcxx_new) {
  std::size_t need = n == 0 ? 1 : n;
  if (libstdcxx_new) {
    // (n + align - 1) & ~(align - 1), as libstdc++ 12 computes it.
    need = (need + align - 1) & ~(align - 1);
    if (need == 0) return false;
  }
  std::size_t total;
  if (__builtin_add_overflow(need, align, &total) || __builtin_add_overflow(total, 4096, &total)) return false;
  if (align >= (std::size_t{1} << 47)) return false;  // larger than the address space
  return kernel_maps(total);
}

enum class Entry { memalign, aligned_alloc, posix_memalign, new_nothrow };
const char* name(Entry e) {
  switch (e) {
    case Entry::memalign: return "memalign";
    case Entry::aligned_alloc: return "aligned_alloc";
    case Entry::posix_memalign: return "posix_memalign";
    case Entry::new_nothrow: return "operator new(align_val_t, nothrow)";
  }
  return "?";
}

struct Answer {
  void* p;
  int err;  // errno after the call; posix_memalign: its return value
  int errno_after;
};

Answer call(Entry e, std::size_t align, std::size_t n) {
  Answer a{nullptr, 0, 0};
  errno = 0;
  capture_begin();
  switch (e) {
    case Entry::memalign: a.p = memalign(opaque(align), opaque(n)); a.err = errno; break;
    case Entry::aligned_alloc: a.p = aligned_alloc(opaque(align), opaque(n)); a.err = errno; break;
    case Entry::posix_memalign: {
      void* out = nullptr;
      a.err = posix_memalign(&out, opaque(align), opaque(n));
      if (a.err == 0) a.p = out;
      break;
    }
    case Entry::new_nothrow:
      a.p = ::operator new(opaque(n), std::align_val_t{opaque(align)}, std::nothrow);
      a.err = errno;
      break;
  }
  a.errno_after = errno;
  capture_end();
  return a;
}

void release(Entry e, void* p, std::size_t align) {
  if (e == Entry::new_nothrow) ::operator delete(p, std::align_val_t{align});
  else free(p);
}

// The cache must hold something for "a refusal leaves it alone" to mean
// anything; a granted aligned request may have taken what it held.
void prime_cache() {
  if (stats().large_cached_bytes != 0) return;
  void* warm = malloc(opaque(std::size_t{4} << 20));
  CHECK(warm != nullptr);
  std::memset(warm, 1, std::size_t{4} << 20);
  free(warm);
  CHECK(stats().large_cached_bytes != 0, "a freed 4 MiB block was not cached (LOWTIDE_CACHE=0?)");
}

// A refused request: nothing cached is given back, nothing counted out.
void check_refusal_changed_nothing(const lowtide_stats& before, Entry e, std::size_t align, std::size_t n) {
  const lowtide_stats after = stats();
  CHECK(after.large_cached_bytes == before.large_cached_bytes,
        "%s(%#zx, %zu) refused, yet the cache went from %" PRIu64 " to %" PRIu64 " bytes", name(e), align, n,
        before.large_cached_bytes, after.large_cached_bytes);
  CHECK(after.large_out == before.large_out && after.small_out == before.small_out,
        "%s(%#zx, %zu) refused, yet bytes were counted out (large %" PRIu64 " -> %" PRIu64 ", small %" PRIu64
        " -> %" PRIu64 ")",
        name(e), align, n, before.large_out, after.large_out, before.small_out, after.small_out);
}

void check_power_of_two(Entry e, int k, std::size_t n) {
  const std::size_t align = std::size_t{1} << k;
  prime_cache();
  const lowtide_stats before = stats();
  const Answer a = call(e, align, n);
  if (e == Entry::posix_memalign && align < sizeof(void*)) {
    CHECK(a.p == nullptr && a.err == EINVAL && a.errno_after == 0, "posix_memalign(2^%d): %d, errno %d", k, a.err,
          a.errno_after);
    return;
  }
  if (a.p != nullptr) {
    CHECK(lt::aligned_to(a.p, align), "%s(2^%d, %zu) = %p: not aligned", name(e), k, n, a.p);
    CHECK(malloc_usable_size(a.p) >= n, "%s(2^%d, %zu): usable size %zu", name(e), k, n, malloc_usable_size(a.p));
    static_cast<volatile char*>(a.p)[0] = 1;
    static_cast<volatile char*>(a.p)[n - 1] = 1;
  } else {
    // posix_memalign returns the error and leaves errno alone.
    if (e == Entry::posix_memalign)
      CHECK(a.err == ENOMEM && a.errno_after == 0, "posix_memalign(2^%d, %zu): %d, errno %d", k, n, a.err,
            a.errno_after);
    else
      CHECK(a.err == ENOMEM, "%s(2^%d, %zu) = NULL, errno %d (want ENOMEM)", name(e), k, n, a.err);
    check_refusal_changed_nothing(before, e, align, n);
  }
  // glibc's answer: machine-independent from 2^47 on, the kernel's below.
  if (k >= 47 || g_heuristic) {
    const bool want = expected_grant(n, align, e == Entry::new_nothrow);
    CHECK((a.p != nullptr) == want, "%s(2^%d, %zu) = %p; glibc %s", name(e), k, n, a.p,
          want ? "grants it" : "returns NULL (ENOMEM)");
  }
  if (a.p != nullptr) release(e, a.p, align);
}

// The alignments glibc does not take as they are.
void check_odd_alignments() {
  struct Case {
    std::size_t align;
    std::size_t effective;  // memalign/aligned_alloc: 0 = NULL
    int err;                // memalign/aligned_alloc errno when NULL
  };
  const Case cases[] = {
      {0, 16, 0},
      {3, 16, 0},
      {24, 32, 0},
      {48, 64, 0},
      {100, 128, 0},
      {4097, 8192, 0},
      {(std::size_t{3} << 20), std::size_t{4} << 20, 0},
      {(std::size_t{3} << 17), std::size_t{256} << 10, 0},
      {(std::size_t{1} << 62) + 1, 0, ENOMEM},  // rounds up to 2^63
      {(std::size_t{1} << 63) + 1, 0, EINVAL},
      {std::size_t{3} << 62, 0, EINVAL},
      {SIZE_MAX, 0, EINVAL},
  };
  for (const Case& c : cases) {
    for (Entry e : {Entry::memalign, Entry::aligned_alloc}) {
      prime_cache();
      const lowtide_stats before = stats();
      const Answer a = call(e, c.align, 1);
      if (c.effective != 0) {
        CHECK(a.p != nullptr, "%s(%#zx, 1) = NULL, errno %d; glibc grants it", name(e), c.align, a.err);
        CHECK(lt::aligned_to(a.p, c.effective), "%s(%#zx, 1) = %p: not aligned to %#zx", name(e), c.align, a.p,
              c.effective);
        free(a.p);
      } else {
        CHECK(a.p == nullptr && a.err == c.err, "%s(%#zx, 1) = %p, errno %d; glibc: NULL, errno %d", name(e),
              c.align, a.p, a.err, c.err);
        check_refusal_changed_nothing(before, e, c.align, 1);
      }
    }
    const bool ok = c.align != 0 && c.align % sizeof(void*) == 0 && (c.align & (c.align - 1)) == 0;
    if (!ok) {
      const Answer a = call(Entry::posix_memalign, c.align, 1);
      CHECK(a.p == nullptr && a.err == EINVAL && a.errno_after == 0, "posix_memalign(%#zx): %d, errno %d", c.align,
            a.err, a.errno_after);
    }
  }
}

}  // namespace

int main() {
  lt::arm_watchdog(120, "alignment");
  g_real_stderr = dup(2);
  g_capture = memfd_create("lowtide-stderr", 0);
  CHECK(g_real_stderr >= 0 && g_capture >= 0, "dup/memfd_create: %s", std::strerror(errno));
  if (FILE* f = std::fopen("/proc/sys/vm/overcommit_memory", "r")) {
    int mode = -1;
    if (std::fscanf(f, "%d", &mode) == 1) g_heuristic = mode == 0;
    std::fclose(f);
  }
  std::printf("overcommit heuristic: %s\n", g_heuristic ? "yes (the kernel's answer is glibc's)" : "no");

  for (std::size_t n : {std::size_t{1}, std::size_t{200000}})
    for (Entry e : {Entry::memalign, Entry::aligned_alloc, Entry::posix_memalign, Entry::new_nothrow})
      for (int k = 0; k < 64; ++k) check_power_of_two(e, k, n);
  check_odd_alignments();

  read_captured();
  CHECK(std::strstr(g_seen, "is full") == nullptr, "a refused alignment warned falsely:\n%s", g_seen);
  std::printf("stderr of the calls (%zu bytes): %s\n", g_seen_len, g_seen_len ? g_seen : "(empty)");
  std::printf("alignment: ok\n");
  return 0;
}
