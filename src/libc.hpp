// The C semantics of every entry point, in one place (snmalloc's
// global/libc.h): glibc 2.36's contract for each (errno, overflow,
// alignment rules, realloc's special cases, the new_handler loop) and
// forwarding when lowtide is not the process's allocator. Below it,
// route.hpp decides which path serves a request. exports.cpp only forwards
// to these, one line each.
#pragma once
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <malloc.h>

#include "lowtide/lowtide.h"
#include "large_path.hpp"
#include "route.hpp"
#include "small_path.hpp"
#include "state.hpp"
#include "stats.hpp"

struct rlimit;

namespace lowtide::libc {

// Everything but the common case: not yet initialised, forwarding, large,
// out of memory, and (for free) large blocks.
void* malloc_slow(std::size_t n);
void free_slow(void* p);
void* operator_new_slow(std::size_t n, std::size_t align, bool nothrow);
// The align_val_t forms of operator new. An alignment that is not a power
// of two (0 too) is undefined behaviour; libstdc++ fails it at once with
// std::bad_alloc (nothrow: NULL), without the new_handler, and so does
// lowtide (it served such a request until 2026-12-05).
void* operator_new_aligned(std::size_t n, std::size_t align, bool nothrow);
// The fast path's failure (malloc_miss, new_miss): take back what small_pop counted (out of line).
void uncount_small_fast(std::size_t n, stats::Counter call);
// The rest of free's fast path where mimalloc may make a system call (the
// block's page empties, or it is huge or aligned): free() leaves errno
// alone (glibc >= 2.33, POSIX 2024), so it is saved around the call.
// The free call is already counted (route::release counts the bytes).
void free_keep_errno(void* p);
// The same for a small block already counted as freed.
void release_keep_errno(void* p);
// Open this thread's cache (small_path.hpp), in its slot.
void open_thread_cache(stats::Slot* st);
// free of a block whose bin is full: the bin onto the shelf and p into the
// emptied bin, else p to mimalloc (errno kept).
// (Bin 0, of the classes not cached, is always full: p to mimalloc.)
// (p first, and its page found again from p (the fast path found the
// slice entry to be its page: slice_of): the inlined caller then moves no
// register to make the call, and addresses the page's fields from the
// segment and the slice's offset without adding them up first.)
void free_to_shelf(void* p, small::ThreadCache* tc);
// free of a block the cache does not take (aligned blocks on its page,
// its class above kCacheMax, or mimalloc's huge blocks, or any block while
// the cache is closed: the thread is not warm yet or past its exit
// destructor); the call is counted in tc's slot, not yet its bytes (the
// parked cache: counted nowhere yet, free_uncached). Its page is found here
// (the fast path read only p's slice entry).
void free_not_cached(void* p, small::ThreadCache* tc);
// free of a small block p (on `page`) by a thread whose cache may open
// (armed, not yet open): opens it once the thread is warm (from its next
// free on), then p to mimalloc as free's fast path does.
void free_arming(stats::Slot* st, void* p, const unsigned char* page);
// The fast path's rest when the thread's bin of n's class (u) is empty or it
// has no cache yet: a bin from the class's shelf when it holds one (a
// thread with no cache opens one if it is warm, kCacheWarm mallocs: a
// producer that never frees), else mimalloc. On failure the counts are
// taken back and the caller's slow path serves n (malloc_slow, or
// operator_new_slow with `nothrow`), which counts for itself, retries and
// sets errno. Out of line and reached by a tail call: the inlined fast path
// keeps nothing across a call, so it saves no register.
void* malloc_miss(stats::Slot* st, std::size_t n, std::size_t u);
void* new_miss(stats::Slot* st, std::size_t n, std::size_t u, bool nothrow);
// The miss functions reached from the inlined fast paths: the slot found
// from tc here, not there, where it would be one more register. tc the
// parked cache (a thread without a slot: what the fast path counted went
// to the parked slot), they hand the call to the *_uncached functions
// below, which count it for real from t_local (making the slot).
void* malloc_miss_cached(small::ThreadCache* tc, std::size_t n, std::size_t u);
void* new_miss_cached(small::ThreadCache* tc, std::size_t n, std::size_t u, bool nothrow);
void* malloc_uncached(std::size_t n);
void* new_uncached(std::size_t n, bool nothrow);
void free_uncached(void* p);

// The counter slot of the thread whose cache tc is: t_local.cache is only
// ever &t_local.stats->cache (from stats::attach to the exit destructor)
// or the parked cache,
// itself in a slot (state.hpp), so the fast paths load that one pointer,
// test nothing, and find the slot at a fixed offset from it.
inline stats::Slot* slot_of(small::ThreadCache* tc) {
  return reinterpret_cast<stats::Slot*>(reinterpret_cast<char*>(tc) - offsetof(stats::Slot, cache));
}

// The common case, inlined into the exported symbols: a small request of
// a class in the lookup table (n < route::settings.malloc_fast_below, which
// the caller checked: the process is ready, n is below the cutoff and its
// class is in the verified table), from the thread's cache (never NULL:
// a closed or parked one has empty bins, so the call misses). It is counted before anything is allocated,
// from n and the class table alone; then a block from the thread's cache,
// or NULL: the caller tail-calls its miss function above.
inline void* small_pop(small::ThreadCache* tc, std::size_t n, std::size_t u, stats::Counter call) {
  stats::count_small_alloc(slot_of(tc), call, n, u);
  return small::cache_pop_bin(tc, small::fast_bin(n));
}

static_assert(64 - __builtin_clzll(small::kTableMax) < stats::kHistBuckets,
              "count_small_alloc's bucket needs no clamp below the table's end");

// On x86-64 the gate is read by the `cmp` itself (one instruction: GCC
// never folds an atomic load into another): a plain load is an acquire on
// x86, and the volatile asm with its memory clobber keeps the compiler from
// moving any later load (the class tables, t_local) above it.
inline bool fast_ok(std::size_t n) {
#if defined(__x86_64__)
  bool below;
  asm volatile("{cmpq %[gate], %[n]|cmp %[n], %[gate]}"
               : "=@ccb"(below)
               : [gate] "m"(*reinterpret_cast<const std::size_t*>(&route::settings.malloc_fast_below)), [n] "r"(n)
               : "memory");
  return __builtin_expect(below, 1);
#else
  return __builtin_expect(n < route::settings.malloc_fast_below.load(std::memory_order_acquire), 1);
#endif
}

inline void* malloc(std::size_t n) {
  if (fast_ok(n)) {
    // (Never NULL: a thread without a slot counts into the parked cache's,
    // whose bins are empty: the miss function counts again.)
    small::ThreadCache* tc = t_local.cache;
    const std::size_t u = small::fast_class(n);
    if (void* h = small_pop(tc, n, u, stats::malloc_calls); __builtin_expect(h != nullptr, 1)) return h;
    return malloc_miss_cached(tc, n, u);
  }
  return malloc_slow(n);
}

inline void free(void* p) {
  if (p == nullptr) return;
  // Not a large block, the gate open (route.hpp). The thread's cache is
  // never NULL (t_local): open, closed or the parked one, whose counter
  // slot (slot_of) is counted into here and again out of line when it is
  // the parked one; only an open cache takes the block (take_below).
  if (__builtin_expect(!route::settings.free_slow_for(p), 1)) {
    small::ThreadCache* tc = t_local.cache;
    stats::Slot* st = slot_of(tc);
    stats::add(st, stats::free_calls, 1);
    // p's slice entry, its page if the block is one the cache may take
    // (small_path.hpp's slice_of; every call out of here is a tail call:
    // no registers to save on the way in).
    const small::SliceRef slice = small::slice_ref(p);
    if (const std::uint64_t u = small::slice_size_field(slice); __builtin_expect(small::slice_cacheable(slice, u, tc), 1)) {
      stats::add(st, stats::small_freed, u);
      // Into this thread's cache while its bin has room. (Bin 0, of
      // classes not cached, has cap 0: never room.)
      // (64 bits wide: no `mov` to zero-extend it for the second index.)
      const std::size_t b = small::cache_bin[u / kMinAlign];
      if (__builtin_expect(small::cache_take_room(tc, b), 1)) {
        if (__builtin_expect(small::cache_is_head(tc, b, p), 0)) small::cache_double_free(p);
        return small::cache_link(tc, b, p);
      }
      // A cached class whose bin is full: the bin to the shelf (the
      // room taken back there).
      return free_to_shelf(p, tc);
    }
    return free_not_cached(p, tc);
  }
  free_slow(p);
}

// operator new: align 0 = the default; failure runs the new_handler loop.
inline void* operator_new(std::size_t n, std::size_t align, bool nothrow) {
  if (align == 0 && fast_ok(n)) {
    small::ThreadCache* tc = t_local.cache;  // (never NULL: malloc above)
    const std::size_t u = small::fast_class(n);
    if (void* h = small_pop(tc, n, u, stats::malloc_calls); __builtin_expect(h != nullptr, 1)) return h;
    return new_miss_cached(tc, n, u, nothrow);
  }
  return operator_new_slow(n, align, nothrow);
}

// The interposed mlockall: under MCL_CURRENT the kernel would populate and
// lock every read-write page, free extents of the range included, so those
// are made PROT_NONE first (Arena::protect_free).
int mlockall(int flags);
// The interposed mlock/mlock2: a lock on lowtide's range turns growth by
// mremap off (pal::mremap_growth_ok) until munlockall.
int mlock2(const void* p, std::size_t len, unsigned flags);
// The interposed mprotect/pkey_mprotect: a call that takes write permission
// from part of lowtide's range (or gives it a key) has freed blocks made
// read-write again before the reuse cache keeps them (pal::writable_again).
int mprotect(void* p, std::size_t len, int prot);
int pkey_mprotect(void* p, std::size_t len, int prot, int pkey);
// The interposed setrlimit/prlimit: a program that lowers its own
// RLIMIT_AS while it runs has lowtide's range cut to fit it first
// (Arena::shrink_to), as a limit present at start-up has it reserved.
int prlimit(int pid, int resource, const struct rlimit* new_limit, struct rlimit* old_limit);

void* calloc(std::size_t n, std::size_t size);
// realloc's every case but the common one below (a null p, n = 0, a
// large block or size, forwarding, a thread without its slot, a page with
// aligned blocks).
void* realloc_slow(void* p, std::size_t n);

// The common case, inlined: a small block resized to 0 < n < cutoff by a
// thread with its slot. Where the block already holds n and no more than
// half of it would go unused, it stays where it is, without a call: the
// rule of mimalloc 2.0.9's own realloc (which would return p itself), applied
// here from the size free's fast path reads from the block's page (the same
// mimalloc 2.0.9 layout: the gate is open only where configure() checked
// it). Counted as before: a realloc call, the old size freed and handed out
// again. A log or string grown a few bytes at a time mostly stays.
inline void* realloc(void* p, std::size_t n) {
  // The free gate open: not forwarding, p not a large block (route.hpp).
  if (__builtin_expect(p != nullptr && !route::settings.free_slow_for(p) && n - 1 < route::settings.cutoff - 1, 1))
    if (stats::Slot* st = t_local.stats; __builtin_expect(stats::kEnabled && st != nullptr, 1)) {
      const unsigned char* page = small::page_of(p);
      if (const std::size_t old = small::page_block_size(page); __builtin_expect(old != 0, 1)) {
        stats::count_request(st, stats::realloc_calls, n);
        if (const std::size_t r = small_request(n); r <= old && r >= old / 2) {
          stats::add(st, stats::small_freed, old);
          stats::add(st, stats::small_requested, n);
          stats::add(st, stats::small_out, old);
          return p;
        }
        return route::resize_in_small(p, n, st, old);  // (a tail call)
      }
    }
  return realloc_slow(p, n);
}
void* reallocarray(void* p, std::size_t n, std::size_t size);
void* memalign(std::size_t align, std::size_t n);
int posix_memalign(void** out, std::size_t align, std::size_t n);
void* valloc(std::size_t n);
void* pvalloc(std::size_t n);
std::size_t usable_size(const void* p);
std::size_t good_size(std::size_t n);

// BSD's reallocf: frees p when the resize fails.
void* reallocf(void* p, std::size_t n);
// NetBSD's reallocarr: 0 or an errno value; *pp untouched on failure.
int reallocarr(void* pp, std::size_t n, std::size_t size);
int mallopt(int param, int value);
int trim(std::size_t pad);
struct mallinfo2 info();
// The old mallinfo: int fields, saturated instead of wrapped past 2 GiB.
struct mallinfo info_int();
// _exit and _Exit: the exit-time report, then exit_group.
[[noreturn]] void exit_now(int status);
void print_stats();
// This thread's cached small blocks and the shelves' back to mimalloc
// (errno kept; a busy shelf is left as it is), so that its collect can give
// their pages back: malloc_trim, lowtide_release, and every forced mimalloc
// collect (small::on_forced_collect), a thread's exit among them. The
// shelves too: a thread's own bin goes on a shelf when a block of another
// thread's page overflows it (at its exit, often: the freeing of the
// std::thread state its creator made), and blocks left there keep its pages
// in use through the abandon.
void flush_thread_cache();
int print_info(int options, FILE* fp);

int get_stats(struct ::lowtide_stats* out);
std::size_t release_now();

}  // namespace lowtide::libc
