// Small blocks: mimalloc's mi_* API, with the request rounded so every block
// is 16-byte aligned as glibc's are.
#pragma once
#include <mimalloc.h>

#include <cstdint>

#include "size_math.hpp"
#include "thread_cache.hpp"

namespace lowtide::small {

inline void* allocate(std::size_t n) { return mi_malloc(small_request(n)); }
inline void* allocate_zeroed(std::size_t n) { return mi_zalloc(small_request(n)); }
// mimalloc 2.0.9's mi_malloc_aligned misaligns e.g. (256, 256) (fixed in
// 2.1.0); the _at variant with offset 0 takes a path that does not.
inline void* allocate_aligned(std::size_t n, std::size_t align) {
  return align <= kMinAlign ? allocate(n) : mi_malloc_aligned_at(small_request(n), align, 0);
}
inline void* allocate_zeroed_aligned(std::size_t n, std::size_t align) {
  return align <= kMinAlign ? allocate_zeroed(n) : mi_zalloc_aligned_at(small_request(n), align, 0);
}
inline void* reallocate(void* p, std::size_t n) { return mi_realloc(p, small_request(n)); }
inline void release(void* p) { mi_free(p); }

// The usable size of a live block, read from its mimalloc page the way
// mi_usable_size does, without the call (free counts every block's size, and
// the call with Debian's stack protector was a third of lowtide's cost per
// malloc+free pair; docs/benchmarks.md). These are facts about the layout of
// Debian's mimalloc 2.0.9 (segments of 32 MiB; the page of a 64 KiB slice is
// found through the slice table in the segment's header; a page records its
// block size and whether any block in it was aligned), not an interface: so
// configure() turns the shortcut on only for mimalloc 2.0.9 and only after
// it gave mi_usable_size's answer for a block of every size class, and
// tests/unit/size_class_test.cpp checks it against mi_usable_size on blocks
// of every kind (aligned, realloc'd, other threads', mimalloc's huge ones).
// A page with aligned blocks, or one whose block size does not fit the
// field, is asked the usual way.
namespace page_layout {
inline constexpr std::uintptr_t kSegmentMask = ~((std::uintptr_t{1} << 25) - 1);
inline constexpr unsigned kSliceShift = 16;
inline constexpr std::size_t kSlicesAt = 0x108, kSliceSize = 80;
inline constexpr std::size_t kSliceOffsetAt = 0x4, kFlagsAt = 0xe, kUsedAt = 0x18, kBlockSizeAt = 0x1c;
inline constexpr std::size_t kHeapAt = 0x30;  // the heap that owns the page (xheap)
inline constexpr unsigned char kHasAligned = 0x2;
inline constexpr std::uint32_t kBlockSizeMax = 0x7fffffff;
// The segment's header (mi_segment_t): whether its memory may be
// decommitted, when its scheduled decommits are due (mimalloc's clock:
// CLOCK_MONOTONIC in ms; 0: none scheduled), the 64 KiB units scheduled
// (decommit_mask: 512 bits, one per slice), its kind (0: normal, pages
// inside) and the thread that owns it. Used by trim_own, only where
// configure() saw them right (segment_spans_known).
inline constexpr std::size_t kSegAllowDecommitAt = 0x20, kSegDecommitExpireAt = 0x28, kSegDecommitMaskAt = 0x30,
                             kSegCommitMaskAt = 0x70, kSegKindAt = 0xf0, kSegThreadAt = 0x100;
inline constexpr unsigned kCommitMaskWords = 8;
}  // namespace page_layout
extern __attribute__((visibility("hidden"))) bool page_size_direct;  // set by configure()

inline const unsigned char* page_of(const void* p) {
  using namespace page_layout;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const auto seg = (a - 1) & kSegmentMask;
  const auto* slice = reinterpret_cast<const unsigned char*>(seg + kSlicesAt + ((a - seg) >> kSliceShift) * kSliceSize);
  std::uint32_t back;
  __builtin_memcpy(&back, slice + kSliceOffsetAt, sizeof back);
  return slice - back;
}
// Blocks in use in the page (its owner changes it; read relaxed).
inline std::uint32_t page_used(const unsigned char* page) {
  return __atomic_load_n(reinterpret_cast<const std::uint32_t*>(page + page_layout::kUsedAt), __ATOMIC_RELAXED);
}

// The block size the page records, or 0 when it must be asked (a page that
// holds aligned blocks, or a huge block whose size the field cannot hold).
inline std::uint32_t page_block_size(const unsigned char* page) {
  using namespace page_layout;
  std::uint32_t size;
  __builtin_memcpy(&size, page + kBlockSizeAt, sizeof size);
  if (__builtin_expect((page[kFlagsAt] & kHasAligned) != 0 || size > kBlockSizeMax, 0)) return 0;
  return size;
}

// The heap that owns the page (its owner sets it; read relaxed). Only
// compared, never followed; page_heap_known says the offset was checked.
inline const void* page_heap(const unsigned char* page) {
  return reinterpret_cast<const void*>(
      __atomic_load_n(reinterpret_cast<const std::uintptr_t*>(page + page_layout::kHeapAt), __ATOMIC_RELAXED));
}
extern __attribute__((visibility("hidden"))) bool page_heap_known;  // set by configure()
// The calling thread's mimalloc heap (ThreadCache::heap).
const void* thread_heap();

// What the page says, or 0 when it must be asked (aligned blocks, huge).
inline std::size_t usable_from_page(const void* p) { return page_block_size(page_of(p)); }

// free's fast path (open only where page_size_direct holds: route.hpp):
// the block's usable size from its page when mi_free is sure to make no
// system call, so errno needs no saving around it; else 0. In mimalloc
// 2.0.9 a free makes system calls only where a page empties
// (_mi_page_retire may free its span or segment: madvise, munmap) and for
// its huge blocks; a free by another thread only pushes the block on a
// list. So a block whose page has at least one other block in use frees
// quietly. Pages with aligned blocks and huge blocks give 0 as well.
inline std::uint32_t quiet_free_size(const void* p) {
  const unsigned char* page = page_of(p);
  const std::uint32_t size = page_block_size(page);
  return __builtin_expect(size != 0 && page_used(page) >= 2, 1) ? size : 0;
}

inline std::size_t usable(const void* p) {
  if (__builtin_expect(page_size_direct, 1)) {
    std::size_t u = usable_from_page(p);
    if (__builtin_expect(u != 0, 1)) return u;
  }
  return mi_usable_size(p);
}
// The usable size malloc(n) would give.
inline std::size_t good_size(std::size_t n) { return mi_good_size(small_request(n)); }
// Was p made by mimalloc? Used only in forwarding mode, to send each pointer
// to the allocator that made it. (mimalloc 2.0.9 knows only addresses below
// 20 TiB here; see docs/reliability.md.)
inline bool owns(const void* p) { return mi_is_in_heap_region(p); }
// Give back what mimalloc keeps for reuse (this thread's freed pages).
inline void collect() { mi_collect(true); }
// From the decay thread, while the process is over its memory limit: give
// back what mimalloc keeps for reuse beyond any one thread (in 2.0.9, a
// forced collect also purges the process-wide segment cache and frees empty
// pages of abandoned segments). mimalloc's collect does nothing on a thread
// whose heap was never set up, and the decay thread never allocates: set it
// up first (from OS pages, no malloc; once, later calls return at once).
// Other threads' own free pages stay theirs: only they can collect them.
// The shelves' blocks first (the thread cache below: no thread may come
// back for them before the limit is met).
void shelf_flush();
// From the decay thread, once no thread has exited for a while
// (cache::note_thread_exit): what mimalloc keeps for exited threads and
// has kept past its purge delay is decommitted (a non-forced collect: the
// segment cache's expired entries, the expired parts of abandoned
// segments; nothing of a live thread's own pages). Set up as above.
inline void collect_expired() {
  mi_thread_init();
  mi_collect(false);
}
// How long mimalloc keeps a freed segment committed before a collect may
// purge it (mi_option_segment_decommit_delay, 500 ms by default).
inline std::uint64_t segment_purge_delay_ns() {
  const long ms = mi_option_get(mi_option_segment_decommit_delay);
  return ms > 0 ? static_cast<std::uint64_t>(ms) * 1'000'000u : 0;
}
inline void release_retained() {
  mi_thread_init();
  shelf_flush();  // (the collect's hook does too, unless a program replaced it)
  mi_collect(true);
}
// Bytes mimalloc has committed, now and at its peak.
inline void committed(std::size_t* now, std::size_t* peak) {
  std::size_t elapsed, user, sys, rss, peak_rss, faults;
  mi_process_info(&elapsed, &user, &sys, &rss, &peak_rss, now, peak, &faults);
}
inline std::size_t committed_now() {
  std::size_t now = 0, peak = 0;
  committed(&now, &peak);
  return now;
}

// Up to this request size a fresh mi_malloc block's usable size is its size
// class, which mi_good_size computes without reading the block's page
// metadata (mimalloc 2.0.9: small and medium objects, up to 128 KiB; larger
// ones are rounded differently). configure() checks it and sets 0 if this
// mimalloc disagrees; tests/unit/size_class_test.cpp checks every size.
inline constexpr std::size_t kClassExactMax = std::size_t{128} << 10;
extern __attribute__((visibility("hidden"))) std::size_t class_exact_max;
// The commonest classes, looked up without a call: class_table[r / 16] is
// mi_good_size(r) for r <= kTableMax, filled by configure() (0 = unverified),
// and entry 0 is entry 1 (malloc(0) gets the 16-byte class).
inline constexpr std::size_t kTableMax = 8192;
// (In one object with request_bin below: malloc's fast path reads both at
// the same index from one base address, one lea fewer.)
struct FastTables {
  std::uint16_t class_table[kTableMax / kMinAlign + 1];
  std::uint8_t request_bin[kTableMax / kMinAlign + 1];
};
extern __attribute__((visibility("hidden"))) FastTables fast_tables;
inline constexpr auto& class_table = fast_tables.class_table;
extern __attribute__((visibility("hidden"))) bool class_table_ready;  // filled and checked (else malloc's fast path stays closed)

// malloc's fast path: the class of a request of n <= kTableMax bytes, its
// 16-byte round-up's (small_request), by one shift and one load. Every
// entry is a class size c with mi_good_size(c) == c (configure checks), so
// mimalloc can be asked for c itself (allocate_class): the same bin as n's
// round-up, with no rounding left to do.
inline std::size_t fast_class(std::size_t n) { return class_table[(n + kMinAlign - 1) / kMinAlign]; }
inline void* allocate_class(std::size_t c) { return mi_malloc(c); }

// The thread cache (thread_cache.hpp): each thread keeps up to a few KiB
// of the small blocks it freed, per size class, and its next malloc of that
// class takes one back without a call into mimalloc. What it saves is not
// mimalloc's work but the second library call every operation pays behind
// an LD_PRELOAD interposer, and, where one thread frees what another made
// (a queue, a server's request objects), mimalloc's cross-thread free: the
// freeing thread reuses the block itself. Blocks stay mimalloc's: usable
// size, realloc and the page a block lives on do not change; a cached block
// is one mimalloc counts in use, so a bin holds at most its cap: a class's
// base cap (cache_cap: LOWTIDE_THREAD_CACHE bytes, at most kCacheBlocks),
// which a bin that overflows raises step by step up to four times that
// (cache_cap_max), while all threads' raises together stay within
// cache_grow_pool_cap bytes (cache_grow). A thread's cache is given back to
// mimalloc at its exit, at malloc_trim and lowtide_release() on that
// thread, which also put its caps back to their base.
//
// A cached block's first word links to the next; malloc checks it is
// 16-byte aligned before it follows it, so most stray writes into a freed
// block stop the process instead of handing out an arbitrary address. A
// block freed while it is its bin's newest (freed twice with no free of
// its class between) stops the process too, as glibc's fastbin check does.
// Nothing else is written into a cached block: a mark in its second word,
// as glibc's tcache keeps to catch every double free of a cached block, made
// a malloc+free pair handed between two threads twice as slow here
// (docs/benchmarks.md).
inline constexpr std::size_t kCacheMax = kTableMax;  // the largest class cached
// free's fast path reads p's slice entry as if it were p's page, without
// page_of's step back by the slice's offset (two instructions) and with the
// segment and the slice's index taken from p itself (p, not p - 1: two
// more). A block of 16 B - kCacheMax lives in a small page of one slice
// (mimalloc 2.0.9: up to 16 KiB), so for it the slice entry is the page;
// every other slice a valid block starts in is a page's first slice (its
// block size above kCacheMax) or an interior one, whose entry mimalloc
// marks with block size 1 (mi_segment_span_allocate); the segment's own
// first slices hold its header, "block size" 64 KiB or more. So
// slice_cacheable holds only for a block of a small page, its slice being
// its page; anything else is looked up the usual way, out of line.
// configure() checks it (page_sizes_match: slice_agrees) with blocks of
// every class, aligned ones and blocks in interior slices.
// A page's (or slice entry's) block-size field, unchecked.
inline std::uint32_t page_size_field(const unsigned char* page) {
  std::uint32_t size;
  __builtin_memcpy(&size, page + page_layout::kBlockSizeAt, sizeof size);
  return size;
}
inline constexpr std::size_t kSegmentSlices = 512;  // 32 MiB of 64 KiB slices
static_assert(page_layout::kSliceSize == 80 && (std::uintptr_t{kSegmentSlices} << page_layout::kSliceShift) ==
                                                   ~page_layout::kSegmentMask + 1);
// free's fast path: may the block go to the thread cache? Its slice entry
// (size: its block-size field, unchecked) is a page that holds no aligned
// blocks, of 16 <= size <= kCacheMax: page_block_size's two tests, the
// cache's size test and "not an interior slice" (size 1) in one range
// test (a size above kBlockSizeMax is above kCacheMax).
inline bool slice_cacheable(const unsigned char* slice, std::uint32_t size) {
  return __builtin_expect((slice[page_layout::kFlagsAt] & page_layout::kHasAligned) == 0, 1) &&
         size - kMinAlign <= kCacheMax - kMinAlign;
}
// The same two reads for free's fast path, from the segment and the
// slice's offset in it as one base and index: GCC adds them up into a
// register first (one `lea` more) when both loads share them, so on x86-64
// each is one instruction of inline asm. Only read, never written by
// lowtide; mimalloc's writes to a live block's page entry happened before
// the block was handed out.
struct SliceRef {
  std::uintptr_t seg, x80;
};
// The segment from p - 1, as mimalloc finds it: a block mimalloc aligned
// to 32 MiB or more (alignments past 16 MiB get a segment of their own, the
// block at its start + 32 MiB) lies on a segment boundary, and p's own
// mask would read the block's data as a slice entry. From p - 1 the masked
// index wraps to slice 0, the segment's header (64 KiB or more: not
// cacheable). No small page starts a segment, so for every other block it
// is the same segment.
// (The slice's index times 16, by one shift and one mask, then times 5:
// times 80, the entry's size.)
inline SliceRef slice_ref(const void* p) {
  using namespace page_layout;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return {(a - 1) & kSegmentMask, ((a >> (kSliceShift - 4)) & ((kSegmentSlices - 1) << 4)) * 5};
}
// The slice entry itself, for the paths out of line.
inline const unsigned char* slice_ptr(SliceRef s) {
  return reinterpret_cast<const unsigned char*>(s.seg + page_layout::kSlicesAt + s.x80);
}
inline const unsigned char* slice_of(const void* p) { return slice_ptr(slice_ref(p)); }
// (64 bits wide: movl zero-extends, and GCC, told so, adds no `mov` to do it.)
// These reads are `asm volatile`: a plain asm statement GCC takes for
// free of side effects and unable to trap, so it may hoist it above free's
// range gate, where p may be a large block whose segment-aligned base is
// lowtide's PROT_NONE reservation; volatile keeps each on its own path.
inline std::uint64_t slice_size_field(SliceRef s) {
#if defined(__x86_64__)
  std::uint64_t size;
  asm volatile("{movl %c[at](%[seg],%[x]), %k[size]|mov %k[size], DWORD PTR [%[seg]+%[x]+%c[at]]}"
      : [size] "=r"(size)
      : [seg] "r"(s.seg), [x] "r"(s.x80), [at] "i"(page_layout::kSlicesAt + page_layout::kBlockSizeAt));
  return size;
#else
  return page_size_field(slice_ptr(s));
#endif
}
// Is the thread cache tc open (does free's fast path take blocks)?
inline bool cache_is_open(const ThreadCache* tc) { return __atomic_load_n(&tc->take_below, __ATOMIC_RELAXED) != 0; }
inline constexpr std::uint64_t kTakeBelowOpen = kCacheMax - kMinAlign + 1;
// The slice's "holds aligned blocks" flag, read in one instruction.
inline bool slice_has_aligned(SliceRef s) {
#if defined(__x86_64__)
  bool aligned;
  asm volatile("{testb %[bit], %c[at](%[seg],%[x])|test BYTE PTR [%[seg]+%[x]+%c[at]], %[bit]}"
      : "=@ccnz"(aligned)
      : [seg] "r"(s.seg), [x] "r"(s.x80), [at] "i"(page_layout::kSlicesAt + page_layout::kFlagsAt),
        [bit] "i"(page_layout::kHasAligned));
  return aligned;
#else
  return (slice_ptr(s)[page_layout::kFlagsAt] & page_layout::kHasAligned) != 0;
#endif
}
// free's fast path: the size test against tc's take_below (the same range
// while the cache is open, empty while it is closed or parked), one
// memory operand instead of the constant.
inline bool slice_cacheable(SliceRef s, std::uint64_t size, const ThreadCache* tc) {
  return __builtin_expect(!slice_has_aligned(s), 1) && size - kMinAlign < tc->take_below;
}
inline bool slice_cacheable(SliceRef s, std::uint64_t size) {
  return __builtin_expect(!slice_has_aligned(s), 1) && size - kMinAlign <= kCacheMax - kMinAlign;
}
// Blocks a bin holds at most: caps above it made no loop here faster and
// every cached block can keep a mimalloc page from going back.
inline constexpr std::size_t kCacheBlocks = 64;
extern __attribute__((visibility("hidden"))) std::uint8_t cache_bin[kCacheMax / kMinAlign + 1];  // class size / 16 -> its bin (0: not cached)
extern __attribute__((visibility("hidden"))) std::uint8_t cache_cap[kCacheBins];  // a bin's base cap, in blocks (0: off)
extern __attribute__((visibility("hidden"))) std::uint8_t cache_cap_max[kCacheBins];  // what cache_grow may raise it to
// Bytes all threads' raised caps may add over their bases (the pool:
// raises are taken from it and given back when a bin is put back to its
// base, at a thread's exit, at malloc_trim and lowtide_release()).
extern __attribute__((visibility("hidden"))) std::uint32_t cache_grow_pool_cap;
extern __attribute__((visibility("hidden"))) std::uint16_t cache_class[kCacheBins];  // each bin's class size
extern __attribute__((visibility("hidden"))) bool cache_on;  // some class has a cap (LOWTIDE_THREAD_CACHE > 0)
// A thread caches only from its kCacheWarm-th free on: one that makes
// fewer frees gains nothing from a cache, and its exit then has nothing to
// give back. (Chosen when the cache went back only in lowtide's key
// destructor, after mimalloc's had abandoned the thread's segments: every
// thread of bench/thread_churn.cpp, one malloc and one free each, paid
// 33 us for the reclaim. It now goes back at the start of mimalloc's own
// collect, on_forced_collect above.)
inline constexpr std::uint64_t kCacheWarm = 256;

// A cached block's link is not 16-byte aligned (a write after free): stop
// the process, naming the entry point that found it.
[[noreturn]] void cache_corrupt(const char* what, const void* p);

// A request's bin, looked up as fast_class looks up its class (the same
// index), so malloc need not wait for the class to find the bin: request n
// (n <= kTableMax) -> cache_bin of its class (0 while the cache is off).
inline constexpr auto& request_bin = fast_tables.request_bin;
inline unsigned fast_bin(std::size_t n) { return request_bin[(n + kMinAlign - 1) / kMinAlign]; }

// malloc: a cached block of bin b (fast_bin, or cache_bin of the class), or NULL.
inline void* cache_pop_bin(ThreadCache* tc, unsigned b) {
  void* h = tc->head[b];
  if (h == nullptr) return nullptr;
  auto* w = static_cast<std::uintptr_t*>(h);
  const std::uintptr_t next = w[0];
  if (__builtin_expect((next & (kMinAlign - 1)) != 0, 0)) cache_corrupt("malloc()", h);
  tc->head[b] = reinterpret_cast<void*>(next);
  tc->room[b]++;
  // The next pop reads the next block's first word: ask for its line now. A
  // block another thread freed was last written on that thread's CPU (the
  // link), and without this every pop of such a block waited for the line:
  // 87 % of malloc's samples in larson-2t (perf, docs/benchmarks.md). A
  // prefetch never faults, so a NULL or corrupt link is harmless here.
  __builtin_prefetch(reinterpret_cast<const void*>(next), 0, 3);
  return h;
}
// The same for class c (c <= kCacheMax).
inline void* cache_pop(ThreadCache* tc, std::size_t c) { return cache_pop_bin(tc, cache_bin[c / kMinAlign]); }

// free: has bin b (cache_bin[c / kMinAlign] of the freed block's class c)
// room for one more block? Bin 0, of the classes not cached, never has.
inline bool cache_has_room(const ThreadCache* tc, unsigned b) { return tc->room[b] > 0; }
// The blocks bin b holds (its cap less its room). Read by another thread
// (cache_bytes) it is a gauge: two loads, either may move meanwhile.
inline unsigned cache_count(const ThreadCache* tc, unsigned b) {
  const int n = __atomic_load_n(&tc->cap[b], __ATOMIC_RELAXED) - __atomic_load_n(&tc->room[b], __ATOMIC_RELAXED);
  return n > 0 ? static_cast<unsigned>(n) : 0;
}
static_assert(kCacheBlocks <= INT8_MAX, "a bin's room must fit its int8_t");
// free's fast path: take room for one block in bin b; false (and the room
// below what it was by one: cache_give_room_back puts it back) if it had
// none. One `subb` and its sign on x86-64, a single instruction on the
// thread's own line, so a signal handler's free or malloc on this thread
// can land on either side of it. (Not the link after it: a handler that
// shelves the bin in between, or a flush, resets the room, and the block
// linked then is one more than the count says, left in mimalloc's use at
// the bin's next flush: a leak of one block, by a handler POSIX does not
// allow to call malloc or free; reliability.md "Found, not fixed".)
inline bool cache_take_room(ThreadCache* tc, std::size_t b) {
#if defined(__x86_64__)
  bool none;
  asm("{subb $1, %0|sub %0, 1}" : "+m"(tc->room[b]), "=@ccl"(none));
  return !none;
#else
  return __atomic_sub_fetch(&tc->room[b], 1, __ATOMIC_RELAXED) >= 0;
#endif
}
inline void cache_give_room_back(ThreadCache* tc, unsigned b) { __atomic_add_fetch(&tc->room[b], 1, __ATOMIC_RELAXED); }
// free, bin b full (b != 0): raise its cap one step (doubled, at most
// cache_cap_max[b]) if the pool allows, taking back this thread's other
// raises when it does not (round robin, from bins that hold no more than
// their base cap: each put back to it); true if the bin now has room for
// the block being freed. Why a cap grows: a bin that overflows sends every
// further free of its class to mimalloc and every later malloc of it
// misses, and one that overflows with another thread's blocks shelves a
// bin per cap frees. A larger base cap for every class would cost every
// thread memory for classes it does not churn; raises cost at most the
// pool, however many threads there are (docs/benchmarks.md).
bool cache_grow(ThreadCache* tc, unsigned b);
// A thread's cache opening (or emptied): every bin at its base cap.
void cache_reset_caps(ThreadCache* tc);
// Is p its bin's newest block already (a double free)? Then free stops
// the process (cache_double_free, out of line).
inline bool cache_is_head(const ThreadCache* tc, std::size_t b, const void* p) { return tc->head[b] == p; }
// p onto bin b, whose room was taken for it (cache_take_room).
inline void cache_link(ThreadCache* tc, std::size_t b, void* p) {
  *static_cast<void**>(p) = tc->head[b];
  tc->head[b] = p;
}
// p onto bin b, taking room.
inline void cache_put(ThreadCache* tc, unsigned b, void* p) {
  cache_link(tc, b, p);
  tc->room[b]--;
}
[[noreturn]] void cache_double_free(const void* p);

// The shelf: where one thread frees what another made (a queue's consumer,
// a server's worker freeing request objects), the freeing thread's bin
// fills and each later free was mimalloc's cross-thread free, while the
// making thread found its own bin empty and called mimalloc for every
// block. A full bin is handed whole to its class's shelf (at most
// kShelfBins bins a class), and a thread whose bin is empty takes a whole
// bin from it: a list moves, no block is touched. Try-lock only: a busy
// shelf means mimalloc, as without one, so nothing here ever waits (fork,
// signal handlers). What shelves hold is bounded by kShelfBins times the
// bins' caps (16 KiB a class by default: at most 64 KiB a class).
inline constexpr unsigned kShelfBins = 4;
struct alignas(64) Shelf {
  std::uint8_t busy;                // the try-lock (__atomic_test_and_set)
  std::uint8_t n;                   // bins on the shelf (read without the lock as a hint)
  std::uint8_t count[kShelfBins];
  void* head[kShelfBins];
  // Each shelved bin's second block (its head's link), read by the giving
  // thread from a block it has just written: the taking thread hands out
  // the head without reading its line, which is on the giver's CPU.
  void* next[kShelfBins];
};
extern __attribute__((visibility("hidden"))) Shelf shelf[kCacheBins];

// Only a bin that overflows with a block of another thread's page goes on
// the shelf: where a thread frees only its own blocks (a loop of mallocs
// and frees, two such threads side by side) its overflow goes to mimalloc's
// local free as without a shelf; moving those bins between threads made
// bench/churn.cpp with 2 threads 1.5x slower (cache lines and blocks of one
// thread's pages passed to the other).
inline bool shelf_wanted(const ThreadCache* tc, const unsigned char* page) {
  return !page_heap_known || page_heap(page) != tc->heap;
}
// free, p's bin full: the bin goes on the shelf if there is room (then p
// starts it again) and true; false: p is not cached.
bool shelf_give(ThreadCache* tc, unsigned b);
// malloc, the bin of class c empty: a bin from the shelf, its first block
// handed out; NULL if the shelf is empty or busy.
inline bool shelf_has(std::size_t c) { return __atomic_load_n(&shelf[cache_bin[c / kMinAlign]].n, __ATOMIC_RELAXED) != 0; }
void* shelf_take(ThreadCache* tc, std::size_t c);
// Every shelved block back to mimalloc (malloc_trim, lowtide_release;
// errno kept); a busy shelf is left as it is.
void shelf_flush();
// Bytes on the shelves (a gauge: bins move while it reads).
std::size_t shelf_bytes();
// In a fork child: a shelf another thread held at the fork is emptied (its
// bins may be half moved; their blocks stay with the child, unused), and
// the pool of raises is the forking thread's own (tc: its cache, or NULL).
void shelf_fork_child(const ThreadCache* tc);

// Every cached block back to mimalloc (errno kept), the cache left empty.
void cache_flush(ThreadCache* tc);
// hook runs on the collecting thread at the start of every forced mimalloc
// collect, before mimalloc looks at the heap's pages. What it is for: a
// thread's exit. mimalloc's key destructor runs before lowtide's (its key
// was made first), and abandons the heap's segments while the thread cache
// still holds blocks of them; those blocks, freed afterwards, reach
// abandoned pages that nothing collects until some thread reclaims the
// segment, so pages of exited threads stayed resident (bench/churn.cpp
// with 2 threads and MIMALLOC_SEGMENT_DECOMMIT_DELAY=0 kept 24 MiB after
// they exited, raw mimalloc 3). Flushed here, the blocks make their pages
// free before the abandon, and mimalloc frees the emptied segments.
// hook must not take a lock (it may run inside an allocation that failed)
// and must not call into mimalloc's collect. mimalloc keeps one such
// function for the process: a program that registers its own with
// mi_register_deferred_free (it would have to call libmimalloc directly)
// replaces lowtide's, and the thread cache then goes back in lowtide's key
// destructor only, after the abandon, as before this hook.
// An accepted gap: an allocation that finds no memory inside a signal
// handler that interrupted this thread's malloc or free between its read
// of a bin and its write of it would flush that bin under it (a handler
// that calls malloc is outside POSIX; the flush parks the cache against a
// handler's calls during it).
void on_forced_collect(void (*hook)());

// Memory of a live thread's own segments whose blocks were freed (issue
// 14; docs/design.md, "Small blocks freed while their thread lives"). In
// mimalloc 2.0.9 a page whose blocks another thread freed is freed only
// when its owner collects its heap, which no call of a running program
// does; and a page freed in a segment that stays in use (one live block
// anywhere in its 32 MiB) is only scheduled for decommit, carried out when
// that segment next gives a page, maybe never. 500 MiB of 64 KiB blocks
// freed by a consumer thread stayed resident (glibc: 12 MiB). hook runs on
// the owning thread from mimalloc's deferred-free call at a page refill
// (its slow path), every 100 ms to 3.2 s by demand (small_path.cpp,
// TrimState) and at most 1 % of the thread's time (a walk that took t
// waits 100 t), never on a thread's first refill; it is to call trim_own
// under limit::collect_if_idle.
void on_refill(void (*hook)());
// The calling thread's part: its heap collected (pages that other
// threads emptied are freed, and their spans scheduled for decommit), then
// each segment of its pages whose scheduled decommit is due has those
// spans dropped (pal::discard) without waiting for mimalloc; mimalloc's
// own decommit later finds them dropped already. The spans are free: only
// the owner allocates in its segments and a span it takes is cleared from
// the schedule first, so with signals blocked (collect_if_idle) none can
// be taken between the read of the schedule and the drop. Only schedules
// already due (mimalloc's own rule; small_path.cpp says why). True where the
// thread's pages lie in fewer segments than at its last trim: segments
// emptied, which mimalloc keeps in its segment cache for its purge delay
// (500 ms) and gives back only in a later collect (the decay thread's,
// cache::note_segments_emptied).
// out: the small-block bytes the thread has handed out (its counter; 0
// where counting is compiled out), against which the gap between trims
// follows demand. *dropped: the bytes of spans this trim gave back (the
// report's small.trim_dropped).
bool trim_own(std::uint64_t out, std::uint64_t* dropped);
// configure(): the segment header's fields above read right (a span freed
// under the check's eyes is scheduled where kSegDecommitMaskAt says).
extern __attribute__((visibility("hidden"))) bool segment_spans_known;
// Bytes the cache holds (its owner's view; another thread's read is a
// gauge, possibly off by the blocks moving while it reads).
std::size_t cache_bytes(const ThreadCache* tc);
// Set the bins' caps from LOWTIDE_THREAD_CACHE (bytes per class; 0: off).
// After configure(), before the fast paths open.
void configure_cache(std::size_t bytes_per_class);

// The usable size of p, just returned by allocate(n).
inline std::size_t usable_of_new(const void* p, std::size_t n) {
  std::size_t r = small_request(n);
  if (r <= kTableMax) {
    std::size_t u = class_table[r / kMinAlign];
    if (__builtin_expect(u != 0, 1)) return u;
  } else if (r <= class_exact_max) {
    return mi_good_size(r);
  }
  return mi_usable_size(p);
}

// Set at init: mimalloc options lowtide needs, as defaults so a user's own
// MIMALLOC_* variables still win, and the size-class check above.
void configure();

// A secure (AT_SECURE) process: set every mimalloc option to its default, so
// mimalloc never reads a MIMALLOC_* variable from now on, and options it has
// already read (when its constructor ran before lowtide's init) go back to
// their defaults. Must run before lowtide's first mi_* call. What a
// constructor that ran first has already done cannot be undone (see
// docs/configuration.md, "Setuid programs").
void ignore_environment();

// Under a finite RLIMIT_DATA (finite): mimalloc's segments committed as
// their pages are used, not whole when they are mapped. mimalloc 2.0.9
// commits a process's first segment eagerly, 32 MiB that count as data
// before anything is allocated (VmData 33 MiB for a program with one small
// block, against glibc's 0.2), which a data limit then lacks for the
// program's own blocks. Not where the environment names
// MIMALLOC_EAGER_COMMIT (note_environment: the user's choice stands);
// fit_data_limit(false) puts the default back. Called before the first mi_*
// call (init), and with false right after small::configure has mapped the
// first segment (a block is kept in it for good): later segments are eager
// again, since 2.0.9's lazy segments leak at a refused commit (init.cpp).
// The option is written only on a change.
void note_environment(const char* const* env, bool secure);
void fit_data_limit(bool finite);

// True if usable_from_page agrees with mi_usable_size on a block of every
// size class up to `limit` and on aligned blocks, slice_of reads as
// cacheable only the page of a block the cache may take (blocks of every
// class, aligned ones, blocks in medium pages' interior slices), and page_used follows
// this thread's mallocs and frees in a page (configure's check: free_info
// relies on both).
bool page_sizes_match(std::size_t limit);

// True if mi_good_size matches the usable size of real blocks at sizes
// spread over [16, limit] (every class boundary up to 1 KiB, then ~8 per
// power of two).
bool class_sizes_match(std::size_t limit);

}  // namespace lowtide::small
