#include "route.hpp"

#include <cerrno>
#include <cstring>

#include "large_cache.hpp"
#include "large_path.hpp"
#include "log.hpp"
#include "parse.hpp"
#include "platform.hpp"
#include "size_math.hpp"
#include "small_path.hpp"
#include "state.hpp"

namespace lowtide::route {

constinit Settings settings;

namespace {

// One warning per cause (may_fall_back).
std::atomic<bool> warned_full{false};
std::atomic<bool> warned_too_big{false};
std::atomic<bool> warned_no_mapping{false};

// Which path serves a request of n bytes at alignment `align`.
inline bool is_large_request(std::size_t n, std::size_t align) {
  return n >= route::settings.cutoff || align > Arena::kGranule;
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
  if (large::space.disabled || g.mode.load(std::memory_order_relaxed) != kReady) return true;
  const bool too_big = why == large::Result::no_room && n + Arena::kGranule > large::space.arena.size();
  std::atomic<bool>& warned = why == large::Result::no_mapping ? warned_no_mapping
                              : too_big                        ? warned_too_big
                                                               : warned_full;
  if (warned.exchange(true, std::memory_order_relaxed)) return true;
  char range[32], req[32];
  format_size(large::space.arena.size(), range, sizeof range);
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

// What a large-path refusal of n bytes means, in one place: true when the
// request goes to mimalloc instead, false (errno ENOMEM) when it fails.
bool fall_back_after(large::Result r, std::size_t n) {
  switch (r) {
    case large::Result::ok: return false;  // not a refusal; callers never ask
    case large::Result::no_memory: errno = ENOMEM; return false;
    case large::Result::no_room:
    case large::Result::no_mapping: return may_fall_back(n, r);
    case large::Result::no_alignment:
      // glibc would grant it (aligned_refused said so) but the range can
      // never: mimalloc can (2.0.9 serves alignments up to 2^45 from an
      // aligned reservation of its own, and returns NULL, never a
      // misaligned block, above that). Nothing about the range is wrong, so
      // no warning.
      if (pal::overcommit_refuses(n)) {
        errno = ENOMEM;
        return false;
      }
      return true;
  }
  return false;
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

// A small-path block handed out: counted as requested and handed out.
inline void count_small_out(stats::Slot* st, std::size_t n, const void* p) {
  stats::add(st, stats::small_requested, n);
  stats::add_usable(st, stats::small_out, [&] { return small::usable(p); });
}

__attribute__((noinline)) void* small_block(std::size_t n, std::size_t align, bool zero) {
  void* p = zero ? small::allocate_zeroed_aligned(n, align) : small::allocate_aligned(n, align);
  if (p == nullptr) errno = ENOMEM;
  return p;
}

// mimalloc was refused memory by the kernel (after its own collect and
// retry): the reuse cache's blocks are committed memory nobody uses, which
// counts against the same limits (RLIMIT_DATA, overcommit mode 2's charge).
// Given back, and the request tried once more: glibc, whose freed large
// blocks are unmapped at free, would have had that memory. Up to
// 2026-12-07 a small request failed with up to the cache's cap (256 MiB by
// default) of freed blocks still held. Nothing cached: NULL, ENOMEM.
__attribute__((noinline)) void* small_after_purge(std::size_t n, std::size_t align, bool zero) {
  // (What mimalloc was refused is a segment at least, not n.)
  constexpr std::size_t kSegment = ~small::page_layout::kSegmentMask + 1;
  if (!large::give_up_held(n > kSegment ? n : kSegment)) {
    errno = ENOMEM;
    return nullptr;
  }
  return small_block(n, align, zero);
}

// realloc of large block p to n bytes on the small path: one copy of all
// the old block's usable bytes that fit (the program may have written them
// all, and glibc keeps them), then p goes. `why` counts it (a crossing below
// the cutoff, or a fallback from a full range).
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
  count_small_out(st, n, q);
  return q;
}

// realloc of a large block: in the large path while n stays at or above
// shrink_below (cutoff / 2, so a block hovering at the cutoff is not copied
// back and forth), else one copy back to the small path.
void* resize_large(void* p, std::size_t n, stats::Slot* st) {
  if (n < route::settings.shrink_below) return move_to_small(p, n, st, stats::cross_down);
  void* q = nullptr;
  const large::Result r = large::resize(p, n, &q);
  if (r == large::Result::ok) return q;
  // Out of memory: as glibc, fail and keep the block. No room, or no
  // mapping: move the block to mimalloc rather than fail (the same fallback
  // new large blocks get).
  if (!fall_back_after(r, n)) return nullptr;
  return move_to_small(p, n, st, stats::large_fallback);
}

// realloc of a small block: to the large path when it grows to the cutoff,
// else mimalloc's own realloc.
void* resize_small(void* p, std::size_t n, stats::Slot* st) {
  const std::size_t old = small::usable(p);
  if (n >= route::settings.cutoff) {
    void* q = nullptr;
    const large::Result r = large::allocate(n, kMinAlign, Origin::realloc, kFromSmall, &q);
    if (r == large::Result::ok) {
      std::memcpy(q, p, old < n ? old : n);
      small::release(p);
      stats::add(st, stats::cross_up, 1);
      stats::add(st, stats::small_freed, old);
      return q;
    }
    if (!fall_back_after(r, n)) return nullptr;
  }
  return resize_in_small(p, n, st, old);
}

}  // namespace

void* resize_in_small(void* p, std::size_t n, stats::Slot* st, std::size_t old) {
  void* q = small::reallocate(p, n);
  if (q == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  stats::add(st, stats::small_freed, old);
  count_small_out(st, n, q);
  return q;
}

void* allocate(std::size_t n, std::size_t asked, std::size_t align, Origin origin, stats::Counter call, bool zero) {
  if (__builtin_expect(n > kMaxRequest, 0)) {
    errno = ENOMEM;
    return nullptr;
  }
  stats::Slot* st = stats::slot();
  stats::count_request(st, call, asked);
  if (__builtin_expect(!is_large_request(n, align), 1)) {
    void* p = (align == kMinAlign && !zero) ? small::allocate(n) : small_block(n, align, zero);
    if (__builtin_expect(p == nullptr, 0) && (p = small_after_purge(n, align, zero)) == nullptr) return nullptr;
    count_small_out(st, asked, p);
    return p;
  }
  if (align > Arena::kGranule && aligned_refused(n, align, origin)) {
    errno = ENOMEM;
    return nullptr;
  }
  void* p = nullptr;
  const large::Result r = large::allocate(n, align, origin, 0, &p, asked);
  if (r == large::Result::ok) return p;
  if (!fall_back_after(r, n)) return nullptr;
  p = small_block(n, align, zero);
  // (A commit the kernel refused, then mimalloc too: as above.)
  if (p == nullptr) p = small_after_purge(n, align, zero);
  if (p != nullptr) {
    stats::add(st, stats::large_fallback, 1);
    count_small_out(st, asked, p);
  }
  return p;
}

void open_fast_paths() {
  // The table covers requests up to kTableMax: n <= kTableMax rounds to at
  // most kTableMax (a multiple of 16).
  const std::size_t table_end = small::class_table_ready ? small::kTableMax + 1 : 0;
  settings.malloc_fast_below.store(settings.cutoff < table_end ? settings.cutoff : table_end,
                                   std::memory_order_release);
  if (small::page_size_direct) {
    // A disabled arena has size 0: no pointer is in it.
    settings.free_slow_from.store(large::space.arena.base(), std::memory_order_relaxed);
    settings.free_slow_len.store(large::space.arena.size(), std::memory_order_release);
  }
}

void close_fast_paths() {
  settings.malloc_fast_below.store(0, std::memory_order_seq_cst);
  settings.free_slow_len.store(UINTPTR_MAX, std::memory_order_seq_cst);  // the start stays (route.hpp)
}

void release(void* p, const char* what) {
  if (large::space.arena.contains(p)) {
    large::release(p, what);
    return;
  }
  stats::add_usable(stats::slot(), stats::small_freed, [&] { return small::usable(p); });
  small::release(p);
}

void* resize(void* p, std::size_t n, stats::Slot* st) {
  return large::space.arena.contains(p) ? resize_large(p, n, st) : resize_small(p, n, st);
}

}  // namespace lowtide::route
