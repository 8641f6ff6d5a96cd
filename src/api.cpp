#include "api.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "forward.hpp"
#include "init.hpp"
#include "large_cache.hpp"
#include "large_path.hpp"
#include "log.hpp"
#include "parse.hpp"
#include "platform.hpp"
#include "size_math.hpp"
#include "small_path.hpp"
#include "report.hpp"
#include "stats.hpp"
#include "stats_table.hpp"

namespace lowtide::api {

namespace {

#define LT_LIKELY(x) __builtin_expect(!!(x), 1)
#define LT_UNLIKELY(x) __builtin_expect(!!(x), 0)

// Which path serves a request of n bytes at alignment `align`.
inline bool is_large_request(std::size_t n, std::size_t align) {
  return n >= g.cutoff || align > Arena::kGranule;
}

// The large path could not take n bytes (`why`: no_room or no_mapping):
// may mimalloc take them? mimalloc maps with MAP_NORESERVE, which skips the
// kernel's overcommit check, so the check is made here: what glibc's malloc
// would be refused (a block larger than RAM + swap, in the default heuristic
// mode) is refused, ENOMEM. Otherwise warns once per cause: a range full of
// live blocks, a request larger than the whole range, or the kernel refusing
// mappings (mimalloc may still serve from memory it has mapped).
bool may_fall_back(std::size_t n, large::Result why) {
  if (pal::overcommit_refuses(n)) {
    errno = ENOMEM;
    return false;
  }
  if (g.large_disabled || g.mode.load(std::memory_order_relaxed) != kReady) return true;
  const bool too_big = why == large::Result::no_room && n + Arena::kGranule > g.arena.size();
  std::atomic<bool>& warned = why == large::Result::no_mapping ? g.warned_no_mapping
                              : too_big                        ? g.warned_too_big
                                                               : g.warned_full;
  if (warned.exchange(true, std::memory_order_relaxed)) return true;
  char range[32], req[32];
  format_size(g.arena.size(), range, sizeof range);
  if (why == large::Result::no_mapping)
    log::warn("the kernel refused to map a large block (vm.max_map_count, RLIMIT_DATA or an mlock limit); "
              "while it refuses, large blocks go to mimalloc");
  else if (too_big)
    log::warn("a block of {} is larger than the large-block range ({}); such blocks go to mimalloc",
              format_size(n, req, sizeof req), range);
  else
    log::warn("the large-block range ({}) is full; further large blocks go to mimalloc", range);
  return true;
}

// realloc of large block p to n bytes on the small path: one copy of all
// the old block's usable bytes that fit (the program may have written them
// all, and glibc keeps them), then p goes. `why` counts it (a crossing below the
// cutoff, or a fallback from a full range).
void* move_to_small(void* p, std::size_t n, stats::Slot* st, stats::Counter why) {
  std::size_t old = large::usable(p, "realloc()");
  void* q = small::allocate(n);
  if (q == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  std::memcpy(q, p, old < n ? old : n);
  large::release(p, "realloc()");
  stats::add(st, why, 1);
  stats::add(st, stats::small_requested, n);
  stats::add_usable(st, stats::small_out, [&] { return small::usable(q); });
  return q;
}

// Would glibc refuse an aligned request of n bytes at `align` (above a
// granule)? glibc's memalign takes n + align from one accounted mapping
// (mmap or brk), so it gets NULL where the kernel refuses that mapping: on
// this machine (23 GiB, no swap) from 2^35 on, and from 2^47 on anywhere.
// lowtide's own footprint is n: the same check, made here, gives the same
// answer. libstdc++'s aligned operator new first rounds n up to a multiple
// of the alignment (and n = 0 to 1), so its footprint is larger.
bool aligned_refused(std::size_t n, std::size_t align, Origin origin) {
  std::size_t need = n == 0 ? 1 : n;
  if (origin == Origin::new_op && __builtin_add_overflow(need, align - 1, &need)) return true;
  if (origin == Origin::new_op) need &= ~(align - 1);
  std::size_t total;
  if (__builtin_add_overflow(need, align, &total)) return true;
  return total > kMaxRequest || pal::overcommit_refuses(total);
}

__attribute__((noinline)) void* small_fallback(std::size_t n, std::size_t align, bool zero) {
  void* p;
  if (zero) p = align <= kMinAlign ? small::allocate_zeroed(n) : mi_zalloc_aligned_at(small_request(n), align, 0);
  else p = small::allocate_aligned(n, align);
  if (p == nullptr) errno = ENOMEM;
  return p;
}

// The one allocation path behind malloc, calloc, memalign and friends.
// `align` is already a power of two >= 16; `call` is the counter it counts in.
void* allocate(std::size_t n, std::size_t align, Origin origin, stats::Counter call, bool zero) {
  if (LT_UNLIKELY(n > kMaxRequest)) {
    errno = ENOMEM;
    return nullptr;
  }
  stats::Slot* st = stats::slot();
  stats::count_request(st, call, n);
  if (LT_LIKELY(!is_large_request(n, align))) {
    // The common case inline: plain malloc of a small block.
    void* p = (align == kMinAlign && !zero) ? small::allocate(n) : small_fallback(n, align, zero);
    if (LT_UNLIKELY(p == nullptr)) errno = ENOMEM;
    if (LT_LIKELY(p != nullptr)) {
      stats::add(st, stats::small_requested, n);
      stats::add_usable(st, stats::small_out, [&] { return small::usable(p); });
    }
    return p;
  }
  void* p = nullptr;
  if (align > Arena::kGranule && aligned_refused(n, align, origin)) {
    errno = ENOMEM;
    return nullptr;
  }
  const large::Result r = large::allocate(n, align, origin, 0, &p);
  switch (r) {
    case large::Result::ok: return p;
    case large::Result::no_memory: errno = ENOMEM; return nullptr;
    case large::Result::no_room:
    case large::Result::no_mapping:
      if (!may_fall_back(n, r)) return nullptr;
      break;
    case large::Result::no_alignment:
      // glibc would grant it (aligned_refused said so) but the range can
      // never: mimalloc can (2.0.9 serves alignments up to 2^45 from an
      // aligned reservation of its own, and returns NULL, never a
      // misaligned block, above that). Nothing about the range is wrong, so
      // no warning.
      if (pal::overcommit_refuses(n)) {
        errno = ENOMEM;
        return nullptr;
      }
      break;
  }
  p = small_fallback(n, align, zero);
  if (p != nullptr) {
    stats::add(st, stats::large_fallback, 1);
    stats::add(st, stats::small_requested, n);
    stats::add_usable(st, stats::small_out, [&] { return small::usable(p); });
  }
  return p;
}

// Free without counting a free() call (realloc counts itself).
inline void release_block(void* p, const char* what) {
  if (g.arena.contains(p)) {
    large::release(p, what);
  } else {
    stats::Slot* st = stats::slot();
    stats::add_usable(st, stats::small_freed, [&] { return small::usable(p); });
    small::release(p);
  }
}

// --- forwarding mode: lowtide lost the symbol race --------------------------

bool small_owns(const void* p) { return mi_is_in_heap_region(p); }

void* fwd_realloc(void* p, std::size_t n) {
  if (p == nullptr || (!g.arena.contains(p) && !small_owns(p))) return forward::winner.realloc(p, n);
  std::size_t old = g.arena.contains(p) ? large::usable(p, "realloc()") : small::usable(p);
  if (n == 0) {
    free(p);
    return nullptr;
  }
  void* q = forward::winner.malloc(n);
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, old < n ? old : n);
  free(p);
  return q;
}

}  // namespace

void* malloc_slow(std::size_t n) {
  if (LT_UNLIKELY(mode() == kForwarding)) return forward::winner.malloc(n);
  return allocate(n, kMinAlign, Origin::malloc, stats::malloc_calls, false);
}

void free_slow(void* p) {
  int* err = &errno;  // one __errno_location call, not two
  int saved = *err;
  if (LT_UNLIKELY(g.mode.load(std::memory_order_relaxed) == kForwarding) && !g.arena.contains(p) &&
      !small_owns(p)) {
    forward::winner.free(p);
  } else {
    stats::add(stats::slot(), stats::free_calls, 1);
    release_block(p, "free()");
  }
  *err = saved;
}

void* calloc(std::size_t n, std::size_t size) {
  std::size_t total;
  if (!checked_mul(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (LT_UNLIKELY(mode() == kForwarding)) return forward::winner.calloc(n, size);
  return allocate(total, kMinAlign, Origin::calloc, stats::calloc_calls, true);
}

void* realloc(void* p, std::size_t n) {
  if (p == nullptr) {
    if (LT_UNLIKELY(mode() == kForwarding)) return forward::winner.malloc(n);
    return allocate(n, kMinAlign, Origin::realloc, stats::realloc_calls, false);
  }
  if (LT_UNLIKELY(mode() == kForwarding)) return fwd_realloc(p, n);
  if (n == 0) {  // glibc: frees, returns NULL, errno unchanged
    int saved = errno;
    stats::count_request(stats::slot(), stats::realloc_calls, 0);
    release_block(p, "realloc()");
    errno = saved;
    return nullptr;
  }
  if (n > kMaxRequest) {
    errno = ENOMEM;
    return nullptr;
  }
  stats::Slot* st = stats::slot();
  stats::count_request(st, stats::realloc_calls, n);

  if (g.arena.contains(p)) {
    if (n >= g.shrink_below) {
      void* q = nullptr;
      const large::Result r = large::resize(p, n, &q);
      if (r == large::Result::ok) return q;
      // Out of memory: as glibc, fail and keep the block.
      if (r == large::Result::no_memory) {
        errno = ENOMEM;
        return nullptr;
      }
      // No room, or no mapping: move the block to mimalloc rather than fail
      // (the same fallback new large blocks get).
      if (!may_fall_back(n, r)) return nullptr;
      return move_to_small(p, n, st, stats::large_fallback);
    }
    // Well below the cutoff: back to the small path, one copy.
    return move_to_small(p, n, st, stats::cross_down);
  }

  std::size_t old = small::usable(p);
  if (n >= g.cutoff) {
    void* q = nullptr;
    const large::Result r = large::allocate(n, kMinAlign, Origin::realloc, kFromSmall, &q);
    switch (r) {
      case large::Result::ok:
        std::memcpy(q, p, old < n ? old : n);
        small::release(p);
        stats::add(st, stats::cross_up, 1);
        stats::add(st, stats::small_freed, old);
        return q;
      case large::Result::no_memory: errno = ENOMEM; return nullptr;
      case large::Result::no_room:
      case large::Result::no_mapping:
        if (!may_fall_back(n, r)) return nullptr;
        break;
      case large::Result::no_alignment: break;  // not at 16 bytes
    }
  }
  void* q = small::reallocate(p, n);
  if (q == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  stats::add(st, stats::small_freed, old);
  stats::add(st, stats::small_requested, n);
  stats::add_usable(st, stats::small_out, [&] { return small::usable(q); });
  return q;
}

void* reallocarray(void* p, std::size_t n, std::size_t size) {
  std::size_t total;
  if (!checked_mul(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, total);
}

void* memalign(std::size_t align, std::size_t n) {
  // glibc: an alignment above SIZE_MAX/2+1 cannot be rounded up to a power
  // of two: EINVAL.
  if (align > SIZE_MAX / 2 + 1) {
    errno = EINVAL;
    return nullptr;
  }
  if (LT_UNLIKELY(mode() == kForwarding)) return forward::winner.memalign(align, n);
  return allocate(n, effective_alignment(align), Origin::aligned, stats::aligned_calls, false);
}

int posix_memalign(void** out, std::size_t align, std::size_t n) {
  if (align % sizeof(void*) != 0 || !is_pow2(align / sizeof(void*))) return EINVAL;
  if (LT_UNLIKELY(mode() == kForwarding)) return forward::winner.posix_memalign(out, align, n);
  int saved = errno;
  void* p = allocate(n, effective_alignment(align), Origin::aligned, stats::aligned_calls, false);
  if (p == nullptr) {
    errno = saved;
    return ENOMEM;
  }
  *out = p;
  return 0;
}

void* valloc(std::size_t n) { return memalign(pal::kPageSize, n); }

void* pvalloc(std::size_t n) {
  std::size_t rounded;
  if (__builtin_add_overflow(n, pal::kPageSize - 1, &rounded)) {
    errno = ENOMEM;
    return nullptr;
  }
  rounded &= ~(pal::kPageSize - 1);
  if (rounded == 0) rounded = pal::kPageSize;
  return memalign(pal::kPageSize, rounded);
}

std::size_t usable_size(const void* p) {
  if (p == nullptr) return 0;
  if (g.arena.contains(p)) return large::usable(p, "malloc_usable_size()");
  if (LT_UNLIKELY(g.mode.load(std::memory_order_relaxed) == kForwarding) && !small_owns(p))
    return forward::winner.usable(const_cast<void*>(p));
  return small::usable(p);
}

std::size_t good_size(std::size_t n) {
  if (n > kMaxRequest) return n;
  if (n < g.cutoff) return mi_good_size(small_request(n));
  std::size_t hdr = sizeof(BlockHeader);
  if (n > kMaxRequest - Arena::kGranule) return n;
  return round_up(n + hdr, Arena::kGranule) - hdr;
}

void* operator_new_slow(std::size_t n, std::size_t align, bool nothrow) {
  for (;;) {
    void* p;
    if (LT_UNLIKELY(mode() == kForwarding)) p = align == 0 ? forward::winner.malloc(n) : memalign(align, n);
    else if (align == 0) p = allocate(n, kMinAlign, Origin::new_op, stats::malloc_calls, false);
    else if (align > SIZE_MAX / 2 + 1) p = nullptr;
    else p = allocate(n, effective_alignment(align), Origin::new_op, stats::aligned_calls, false);
    if (LT_LIKELY(p != nullptr)) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) {
      if (nothrow) return nullptr;
      throw std::bad_alloc();
    }
    if (nothrow) {
      try {
        h();
      } catch (...) {
        return nullptr;
      }
    } else {
      h();
    }
  }
}

int mallopt(int param, int value) {
  if (mode() == kForwarding && forward::winner.mallopt != nullptr)
    return forward::winner.mallopt(param, value);
  // glibc's tunables (arenas, mmap threshold, trim threshold) have no meaning
  // here; accept them so callers that check the result carry on.
  return 1;
}

int trim(std::size_t pad) {
  if (mode() == kForwarding) return forward::winner.trim != nullptr ? forward::winner.trim(pad) : 0;
  // Large blocks are already given back at free. What can still be given
  // back is mimalloc's: pages freed but kept for reuse, on this thread.
  std::size_t before = pal::rss_bytes();
  std::size_t cached = cache::purge(true);
  mi_collect(true);
  std::size_t after = pal::rss_bytes();
  return (cached != 0 || after < before) ? 1 : 0;
}

struct mallinfo2 info() {
  struct mallinfo2 m;
  std::memset(&m, 0, sizeof m);
  std::size_t elapsed, user, sys, rss, peak_rss, commit, peak_commit, faults;
  mi_process_info(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
  m.arena = commit;  // bytes mimalloc has committed for small blocks
  m.hblks = g.large_blocks.load(std::memory_order_relaxed);
  m.hblkhd = g.large_mapped.load(std::memory_order_relaxed);
  m.uordblks = m.hblkhd;
  m.usmblks = peak_commit;
  return m;
}

void print_stats() { report::write("stderr", report::kText); }

int print_info(int options, FILE* fp) {
  if (options != 0) {
    errno = EINVAL;
    return -1;
  }
  struct mallinfo2 m = info();
  std::fprintf(fp,
               "<malloc version=\"lowtide-" LOWTIDE_VERSION "\">\n"
               "<total type=\"small\" committed=\"%zu\"/>\n"
               "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n"
               "</malloc>\n",
               m.arena, m.hblks, m.hblkhd);
  return 0;
}

int get_stats(struct ::lowtide_stats* out) {
  if (out == nullptr || out->size < sizeof(std::size_t) + sizeof(std::uint64_t)) {
    errno = EINVAL;
    return -1;
  }
  // Totals only: no per-thread rows. Allocating room for them here showed
  // up in the very counts this returns (and could throw under memory
  // exhaustion, out of a C function).
  stats::Snapshot snap{};
  snap.rows = nullptr;
  snap.cap = 0;
  stats::snapshot(&snap, false);
  std::uint64_t v[stats::kFieldCount];
  stats::read_fields(snap, v);
  struct ::lowtide_stats s;
  std::memset(&s, 0, sizeof s);
  for (unsigned i = 0; i < stats::kFieldCount; ++i)
    std::memcpy(reinterpret_cast<char*>(&s) + stats::kFields[i].offset, &v[i], sizeof v[i]);
  std::size_t n = out->size < sizeof s ? out->size : sizeof s;
  std::size_t keep = out->size;
  std::memcpy(out, &s, n);
  out->size = keep;
  return 0;
}

std::size_t release_now() {
  std::size_t before = pal::rss_bytes();
  cache::purge(true);
  mi_collect(true);
  std::size_t after = pal::rss_bytes();
  return after < before ? before - after : 0;
}

}  // namespace lowtide::api
