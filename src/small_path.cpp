#include "small_path.hpp"

#include <cerrno>
#include <climits>
#include <strings.h>

#include "log.hpp"
#include "platform.hpp"

namespace lowtide::small {

std::size_t class_exact_max = 0;
bool class_table_ready = false;
FastTables fast_tables;

bool page_size_direct = false;
bool page_heap_known = false;

const void* thread_heap() { return mi_heap_get_default(); }

namespace {
void (*forced_collect_hook)() = nullptr;
// mimalloc 2.0.9 calls its deferred-free function at the start of every
// collect, on the collecting thread (heap.c, mi_heap_collect_ex), and
// unforced at each refill of a page (page.c, _mi_malloc_generic: nothing to
// do there). Forced means a thread's exit (its backing heap collected and
// abandoned, _mi_heap_done), mi_collect(true) (malloc_trim,
// lowtide_release, the memory limit) or an allocation about to fail for
// want of memory (collect and retry).

void (*refill_hook)() = nullptr;
constexpr std::uint32_t kTrimGapMinMs = 100, kTrimGapMaxMs = 3200;
constexpr std::uint64_t kTrimShare = 100;  // a trim that took t waits 100 t
constexpr std::uint32_t kReleaseMinKib = 1024;

// A thread's trim state, one initial-exec block (80 bytes; design.md,
// "TLS"): zero at the thread's start.
struct TrimState {
  std::uint64_t due_ns;  // when this thread may next trim (0: not set yet)
  // The gap between trims, by demand: where the thread handed out at least
  // half of what a trim released (the spans it dropped; the pages its
  // collect frees are scheduled then and dropped by a later trim) by its
  // next trim, it is likely to have taken that memory
  // again (a loop of 64 MiB of temporaries every 150 ms), and the gap
  // doubles, up to 3.2 s; where it handed out less, it halves, down to
  // 100 ms. Releasing what comes back costs a fault per page and
  // mimalloc's page set-up again (that loop: 0.09 s of CPU untrimmed, 1.0 s
  // trimmed every 100 ms, 0.17 s with this gap).
  std::uint32_t gap_ms;
  std::uint32_t released_kib;  // what the last trim released
  std::uint64_t out_then;      // the thread's small bytes handed out by then
  std::uint32_t segments;      // segments its pages lay in then
  // Segments whose scheduled spans it dropped, with the due time they had
  // (low 32 bits of each): until mimalloc decommits them itself or
  // schedules more (which moves the due time) the walk passes them by.
  struct {
    std::uint32_t seg, due;
  } dropped[6];
  std::uint32_t dropped_next;
};
__thread TrimState t_trim __attribute__((tls_model("initial-exec")));
static_assert(sizeof(TrimState) <= 80);

void maybe_trim() {
  void (*hook)() = __atomic_load_n(&refill_hook, __ATOMIC_ACQUIRE);
  if (hook == nullptr) return;
  const std::uint64_t now = pal::now_ns();
  const std::uint64_t due = t_trim.due_ns;
  // A thread's first refill only sets the clock: a short-lived thread
  // (thread_churn's) has freed nothing of its own worth a walk.
  if (due == 0) {
    t_trim.gap_ms = kTrimGapMinMs;
    t_trim.due_ns = now + std::uint64_t{kTrimGapMinMs} * 1'000'000u;
  }
  if (due == 0 || now < due) return;
  t_trim.due_ns = UINT64_MAX;  // (mimalloc runs no deferred-free call inside this one)
  hook();
  const std::uint64_t took = pal::now_ns() - now, gap = std::uint64_t{t_trim.gap_ms} * 1'000'000u;
  t_trim.due_ns = now + (took * kTrimShare > gap ? took * kTrimShare : gap);
}

void on_mi_collect(bool force, unsigned long long, void*) {
  if (!force) {
    maybe_trim();
    return;
  }
  if (void (*hook)() = __atomic_load_n(&forced_collect_hook, __ATOMIC_ACQUIRE); hook != nullptr) hook();
}
}  // namespace

void on_forced_collect(void (*hook)()) {
  __atomic_store_n(&forced_collect_hook, hook, __ATOMIC_RELEASE);
  mi_register_deferred_free(&on_mi_collect, nullptr);
}

void on_refill(void (*hook)()) { __atomic_store_n(&refill_hook, hook, __ATOMIC_RELEASE); }

bool segment_spans_known = false;

namespace {
using page_layout::kSegmentMask;
constexpr std::size_t kCommitUnit = std::size_t{1} << page_layout::kSliceShift;

template <class T>
T seg_field(const unsigned char* seg, std::size_t at) {
  T v;
  __builtin_memcpy(&v, seg + at, sizeof v);
  return v;
}
const unsigned char* segment_of(const void* p) {
  return reinterpret_cast<const unsigned char*>(reinterpret_cast<std::uintptr_t>(p) & kSegmentMask);
}
bool mask_bit(const unsigned char* seg, std::size_t mask_at, std::size_t unit) {
  return (seg_field<std::uint64_t>(seg, mask_at + unit / 64 * 8) >> (unit % 64) & 1) != 0;
}
// mimalloc's thread id on x86-64 and AArch64 Linux (2.0.9's _mi_thread_id
// reads the thread pointer's slot).
std::uintptr_t own_thread_id() { return reinterpret_cast<std::uintptr_t>(__builtin_thread_pointer()); }
std::uint64_t mi_now_ms() { return pal::now_ns() / 1'000'000u; }

// The distinct segments of a walk. The heap's pages come bin by bin, so a
// segment with pages in several bins comes back after all the others: a
// ring of the last 32 met missed every one past 32 segments (1 GiB), and
// each of its pages had the segment's spans dropped again (a 1.5 GiB heap
// of 59 segments: 484 repeated discards in one trim, 4 GiB: 7,000 calls
// and 8-34 ms in one malloc, signals blocked), its count a page count.
// A set, on the stack (1 KiB: 32 MiB segments' numbers fit 32 bits).
struct Walk {
  static constexpr unsigned kSlots = 256, kMax = kSlots * 3 / 4;  // (6 GiB of segments)
  std::uint32_t seen[kSlots];  // a segment's address >> 25, open addressing; 0: free
  unsigned segments;           // distinct segments met; UINT_MAX past kMax
  std::uint64_t dropped;        // bytes of spans dropped
  // True the first time s is met (and always past kMax: t_trim.dropped
  // then keeps the discards from repeating, not always).
  bool first(std::uintptr_t s) {
    const auto key = static_cast<std::uint32_t>(s >> 25);
    if (segments == UINT_MAX) return true;
    for (unsigned i = (key * 2654435761u) >> 24;; i = (i + 1) % kSlots) {
      if (seen[i] == key) return false;
      if (seen[i] == 0) {
        if (segments == kMax) {
          segments = UINT_MAX;
          return true;
        }
        seen[i] = key;
        ++segments;
        return true;
      }
    }
  }
};
static_assert(~page_layout::kSegmentMask + 1 == std::uintptr_t{1} << 25 && sizeof(std::uintptr_t) == 8);

void drop_scheduled(std::uintptr_t s, std::uint64_t* dropped) {
  using namespace page_layout;
  const auto* seg = reinterpret_cast<const unsigned char*>(s);
  if (seg_field<std::uintptr_t>(seg, kSegThreadAt) != own_thread_id()) return;  // (another's: never)
  if (!seg_field<bool>(seg, kSegAllowDecommitAt) || seg_field<std::int32_t>(seg, kSegKindAt) != 0) return;
  // What mimalloc itself would decommit at its next look: the schedule,
  // once due (its delay, 25 ms: a span freed and taken again at once stays
  // committed; dropping spans scheduled a moment ago cost bignum 4 % of its
  // CPU time in faults).
  const auto due = seg_field<std::int64_t>(seg, kSegDecommitExpireAt);
  if (due == 0 || due > static_cast<std::int64_t>(mi_now_ms())) return;
  const auto key = static_cast<std::uint32_t>(s >> 25), due_lo = static_cast<std::uint32_t>(due);
  for (const auto& d : t_trim.dropped)
    if (d.seg == key && d.due == due_lo) return;
  t_trim.dropped[t_trim.dropped_next++ % (sizeof t_trim.dropped / sizeof t_trim.dropped[0])] = {key, due_lo};
  for (unsigned w = 0; w < kCommitMaskWords; ++w) {
    std::uint64_t m = seg_field<std::uint64_t>(seg, kSegDecommitMaskAt + std::size_t{w} * 8);
    while (m != 0) {
      const unsigned b = static_cast<unsigned>(__builtin_ctzll(m));
      const std::uint64_t rest = ~(m >> b);  // 0 only where all 64 units are due
      const unsigned run = rest == 0 ? 64 : static_cast<unsigned>(__builtin_ctzll(rest));
      pal::discard(reinterpret_cast<void*>(s + (std::size_t{w} * 64 + b) * kCommitUnit), std::size_t{run} * kCommitUnit);
      *dropped += std::size_t{run} * kCommitUnit;
      m = b + run >= 64 ? 0 : m & ~((std::uint64_t{1} << (b + run)) - 1);
    }
  }
}

bool visit_page(const mi_heap_t*, const mi_heap_area_t* area, void*, std::size_t, void* arg) {
  auto* w = static_cast<Walk*>(arg);
  const auto s = reinterpret_cast<std::uintptr_t>(area->blocks) & kSegmentMask;
  if (w->first(s)) drop_scheduled(s, &w->dropped);
  return true;
}
std::uint32_t to_kib(std::uint64_t b) { return b >> 10 > UINT32_MAX ? UINT32_MAX : static_cast<std::uint32_t>(b >> 10); }
}  // namespace

bool trim_own(std::uint64_t out, std::uint64_t* dropped) {
  mi_heap_t* heap = mi_heap_get_default();
  mi_heap_collect(heap, false);
  Walk w;
  __builtin_memset(w.seen, 0, sizeof w.seen);
  w.segments = 0;
  w.dropped = 0;
  if (segment_spans_known) mi_heap_visit_blocks(heap, false, &visit_page, &w);
  // The gap by demand (TrimState).
  TrimState& t = t_trim;
  if (t.released_kib >= kReleaseMinKib && out >= t.out_then) {
    const bool came_back = to_kib(out - t.out_then) >= t.released_kib / 2;
    t.gap_ms = came_back ? (t.gap_ms * 2 < kTrimGapMaxMs ? t.gap_ms * 2 : kTrimGapMaxMs)
                         : (t.gap_ms / 2 > kTrimGapMinMs ? t.gap_ms / 2 : kTrimGapMinMs);
  }
  t.released_kib = to_kib(w.dropped);
  *dropped = w.dropped;
  t.out_then = out;
  const bool fewer = w.segments < t.segments;
  t.segments = w.segments;
  return fewer;
}

std::uint8_t cache_bin[kCacheMax / kMinAlign + 1];
std::uint8_t cache_cap[kCacheBins];
std::uint8_t cache_cap_max[kCacheBins];
std::uint32_t cache_grow_pool_cap = 0;
namespace {
std::uint32_t grow_pool = 0;  // bytes taken from the pool (__atomic)
// *v -= n, never below 0 (a bound, not a balance: never wraps).
void sub_floor(std::uint32_t* v, std::uint32_t n) {
  if (n == 0) return;
  std::uint32_t old = __atomic_load_n(v, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(v, &old, old > n ? old - n : 0, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}
void pool_give_back(std::uint32_t bytes) { sub_floor(&grow_pool, bytes); }
}  // namespace
std::uint16_t cache_class[kCacheBins];
bool cache_on = false;

void cache_corrupt(const char* what, const void* p) { log::fatal_heap(what, "corrupted thread cache at", p); }

void cache_double_free(const void* p) { log::fatal_pointer("free()", p); }

namespace {
void free_list(void* q, unsigned n);
}

void cache_flush(ThreadCache* tc) {
  const int saved = errno;
  for (unsigned b = 0; b < kCacheBins; ++b) {
    void* q = tc->head[b];
    const unsigned n = cache_count(tc, b);
    tc->head[b] = nullptr;
    tc->room[b] = static_cast<std::int8_t>(tc->cap[b]);
    free_list(q, n);
  }
  cache_reset_caps(tc);
  errno = saved;
}

namespace {
// Bin v's raise taken back: its cap set to its base, the bytes it stood
// above it returned. Atomic (as are the other updates of the caps and
// the sums below), so a signal handler's free on this thread that raises
// or takes back in between leaves the pool's sum exact.
std::uint32_t cap_to_base(ThreadCache* tc, unsigned v) {
  const std::uint8_t base = cache_cap[v];
  const std::uint8_t old = __atomic_exchange_n(&tc->cap[v], base, __ATOMIC_RELAXED);
  // The room follows the cap (the count stays). Until then the bin may take
  // a signal handler's block more than its new cap: harmless, as a bin
  // taken from the shelf holds more.
  __atomic_add_fetch(&tc->room[v], static_cast<std::int8_t>(base - old), __ATOMIC_RELAXED);
  return old > base ? (old - base) * std::uint32_t{cache_class[v]} : 0;
}
}  // namespace

void cache_reset_caps(ThreadCache* tc) {
  std::uint32_t back = 0;
  for (unsigned b = 0; b < kCacheBins; ++b) back += cap_to_base(tc, b);
  // (Zero whatever it says: a signal handler's take-back between a raise's
  // compare-and-swap and its add can leave it above the caps' raises.)
  __atomic_store_n(&tc->grown, 0, __ATOMIC_RELAXED);
  tc->victim = 0;
  pool_give_back(back);
}

bool cache_grow(ThreadCache* tc, unsigned b) {
  const unsigned cap = __atomic_load_n(&tc->cap[b], __ATOMIC_RELAXED), max = cache_cap_max[b];
  if (cap >= max || cap == 0) return false;
  // Doubled, and again while that leaves no room: a bin taken whole from
  // the shelf may hold more than this thread's cap.
  const unsigned count = cache_count(tc, b);
  unsigned want = cap;
  do want = 2 * want < max ? 2 * want : max;
  while (want <= count && want < max);
  const std::uint32_t cost = (want - cap) * std::uint32_t{cache_class[b]};
  auto over = [&] { return __atomic_load_n(&grow_pool, __ATOMIC_RELAXED) + cost > cache_grow_pool_cap; };
  // The pool used up: this thread's other raised bins that hold no more
  // than their base put back to it, round robin from where the last search
  // stopped (nothing to give to mimalloc: such a bin is within its base;
  // one a signal handler's free filled meanwhile overflows until mallocs
  // drain it). A raised bin holding more is in use and keeps its raise:
  // taking it back would give its blocks to mimalloc only for the two
  // classes to take the raise from each other at every overflow (review).
  // No other thread's bins are touched (they are theirs alone), and a
  // thread with no raises of its own gives up at once.
  for (unsigned i = 1; i <= kCacheBins && __atomic_load_n(&tc->grown, __ATOMIC_RELAXED) != 0 && over(); ++i) {
    const unsigned v = (tc->victim + i) % kCacheBins;
    if (v == b || v == 0 || cache_count(tc, v) > cache_cap[v]) continue;
    const std::uint32_t back = cap_to_base(tc, v);
    if (back == 0) continue;
    sub_floor(&tc->grown, back);
    pool_give_back(back);
    tc->victim = static_cast<std::uint8_t>(v);
  }
  // (A plain load first: with the pool used up, no locked instruction on
  // its shared line for every overflowing free.)
  if (over()) return false;
  // Taken from the pool, or given back at once when other threads took it
  // first (two threads racing here may both give up: no harm).
  if (__atomic_add_fetch(&grow_pool, cost, __ATOMIC_RELAXED) > cache_grow_pool_cap) {
    pool_give_back(cost);
    return false;
  }
  std::uint8_t expected = static_cast<std::uint8_t>(cap);
  if (!__atomic_compare_exchange_n(&tc->cap[b], &expected, static_cast<std::uint8_t>(want), false, __ATOMIC_RELAXED,
                                   __ATOMIC_RELAXED)) {
    pool_give_back(cost);  // (changed by a signal handler's free meanwhile)
    return cache_has_room(tc, b);
  }
  __atomic_add_fetch(&tc->room[b], static_cast<std::int8_t>(want - cap), __ATOMIC_RELAXED);
  __atomic_add_fetch(&tc->grown, cost, __ATOMIC_RELAXED);
  return cache_has_room(tc, b);
}

Shelf shelf[kCacheBins];

namespace {
bool shelf_lock(Shelf* sh) { return !__atomic_test_and_set(&sh->busy, __ATOMIC_ACQUIRE); }
void shelf_unlock(Shelf* sh) { __atomic_clear(&sh->busy, __ATOMIC_RELEASE); }

void free_list(void* q, unsigned n) {
  for (unsigned i = 0; i < n && q != nullptr; ++i) {
    void* next = *static_cast<void**>(q);
    mi_free(q);
    q = next;
  }
}
}  // namespace

bool shelf_give(ThreadCache* tc, unsigned b) {
  Shelf* sh = &shelf[b];
  if (__atomic_load_n(&sh->n, __ATOMIC_RELAXED) >= kShelfBins || !shelf_lock(sh)) return false;
  const unsigned n = sh->n;
  const bool room = n < kShelfBins;
  if (room) {
    // The head's link, checked here: a broken one (a write after free)
    // stops the process in this thread rather than in the one that would
    // follow it.
    void* h = tc->head[b];
    // Emptied since free found it full (a signal handler's mallocs on this
    // thread): nothing to shelve, and p goes to mimalloc (review).
    const unsigned count = cache_count(tc, b);
    if (h == nullptr || count == 0) {
      shelf_unlock(sh);
      return false;
    }
    const std::uintptr_t link = *static_cast<const std::uintptr_t*>(h);
    if (__builtin_expect((link & (kMinAlign - 1)) != 0, 0)) {
      shelf_unlock(sh);
      cache_corrupt("free()", h);
    }
    sh->head[n] = h;
    sh->next[n] = reinterpret_cast<void*>(link);
    sh->count[n] = static_cast<std::uint8_t>(count);
    __atomic_store_n(&sh->n, static_cast<std::uint8_t>(n + 1), __ATOMIC_RELAXED);
    // The bin emptied before the lock goes: a free on this thread in
    // between (a signal handler's) must not see it full and shelve the
    // same list twice; it meets the lock and goes to mimalloc (review).
    tc->head[b] = nullptr;
    __atomic_store_n(&tc->room[b], static_cast<std::int8_t>(tc->cap[b]), __ATOMIC_RELAXED);
  }
  shelf_unlock(sh);
  return room;
}

void* shelf_take(ThreadCache* tc, std::size_t c) {
  const unsigned b = cache_bin[c / kMinAlign];
  // Filled since the caller found it empty (a signal handler's free on this
  // thread): use it rather than lose it under a shelved bin.
  if (tc->head[b] != nullptr) return cache_pop(tc, c);
  Shelf* sh = &shelf[b];
  if (!shelf_lock(sh)) return nullptr;
  const unsigned n = sh->n;
  void* h = nullptr;
  if (n != 0) {
    // The head goes to the caller, the rest stays in the bin (the head's
    // link is not read: shelf_give kept it).
    h = sh->head[n - 1];
    tc->head[b] = sh->next[n - 1];
    tc->room[b] = static_cast<std::int8_t>(tc->cap[b] - (sh->count[n - 1] - 1));
    __atomic_store_n(&sh->n, static_cast<std::uint8_t>(n - 1), __ATOMIC_RELAXED);
  }
  shelf_unlock(sh);
  if (h != nullptr) __builtin_prefetch(tc->head[b], 0, 3);
  return h;
}

void shelf_flush() {
  const int saved = errno;
  for (Shelf& sh : shelf) {
    if (__atomic_load_n(&sh.n, __ATOMIC_RELAXED) == 0 || !shelf_lock(&sh)) continue;
    void* head[kShelfBins];
    std::uint8_t count[kShelfBins];
    const unsigned n = sh.n;
    for (unsigned i = 0; i < n; ++i) {
      head[i] = sh.head[i];
      count[i] = sh.count[i];
    }
    __atomic_store_n(&sh.n, 0, __ATOMIC_RELAXED);
    shelf_unlock(&sh);
    for (unsigned i = 0; i < n; ++i) free_list(head[i], count[i]);
  }
  errno = saved;
}

std::size_t shelf_bytes() {
  std::size_t total = 0;
  for (unsigned b = 1; b < kCacheBins; ++b) {
    const unsigned n = __atomic_load_n(&shelf[b].n, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < n && i < kShelfBins; ++i)
      total += std::size_t{cache_class[b]} * __atomic_load_n(&shelf[b].count[i], __ATOMIC_RELAXED);
  }
  return total;
}

void shelf_fork_child(const ThreadCache* tc) {
  for (Shelf& sh : shelf) {
    if (sh.busy == 0) continue;
    sh.n = 0;
    sh.busy = 0;
  }
  // The other threads are gone, and their raises with them.
  grow_pool = tc != nullptr ? tc->grown : 0;
}

std::size_t cache_bytes(const ThreadCache* tc) {
  std::size_t total = 0;
  for (unsigned b = 1; b < kCacheBins; ++b) total += std::size_t{cache_class[b]} * cache_count(tc, b);
  return total;
}

void configure_cache(std::size_t bytes_per_class) {
  if (!class_table_ready || !page_size_direct || bytes_per_class == 0) return;
  // One bin per distinct class of the table, smallest first; classes past
  // the bins' count stay uncached.
  unsigned next = 1;
  for (std::size_t r = kMinAlign; r <= kCacheMax; r += kMinAlign) {
    const std::size_t c = class_table[r / kMinAlign];
    if (c > kCacheMax || cache_bin[c / kMinAlign] != 0) continue;
    if (next == kCacheBins) break;
    const std::size_t cap = bytes_per_class / c;
    if (cap == 0) continue;
    cache_bin[c / kMinAlign] = static_cast<std::uint8_t>(next);
    cache_class[next] = static_cast<std::uint16_t>(c);
    cache_cap[next] = static_cast<std::uint8_t>(cap < kCacheBlocks ? cap : kCacheBlocks);
    const std::size_t max = 4 * bytes_per_class / c;
    cache_cap_max[next] = static_cast<std::uint8_t>(max < kCacheBlocks ? max : kCacheBlocks);
    cache_on = true;
    ++next;
  }
  // All threads' raises together at most 256 times the bytes a class
  // starts with (4 MiB by default: five threads with every class grown, a
  // thread's ~0.75 MiB). A bound in bytes of the caps, so what the caches
  // can hold stays known however many threads there are: every thread's
  // base caps (~400 KiB) plus the pool.
  cache_grow_pool_cap = static_cast<std::uint32_t>(256 * bytes_per_class);
  for (std::size_t g = 0; g <= kTableMax / kMinAlign; ++g) {
    const std::size_t c = class_table[g];
    request_bin[g] = c != 0 && c <= kCacheMax ? cache_bin[c / kMinAlign] : 0;
  }
}

namespace {
// One block of r bytes (aligned to `align` when not 0): does the page say
// what mi_usable_size says? 0 from the page means "ask mimalloc" (a page
// that holds aligned blocks) and is never wrong; `read` counts the blocks
// whose size did come from the page.
// free's fast path on block p: if its slice entry reads as cacheable, it
// is p's page and p a block start of the size it records (mi_usable_size of
// an aligned block's inner address is less), at most kCacheMax. (An aligned
// request may get a plain block that happened to be aligned: no flag then.)
bool slice_agrees(const void* p) {
  const unsigned char* slice = slice_of(p);
  if (!slice_cacheable(slice, page_size_field(slice))) return true;
  return slice == page_of(p) && page_size_field(slice) == mi_usable_size(p) && mi_usable_size(p) <= kCacheMax;
}

bool page_agrees(std::size_t r, std::size_t align, unsigned* read, unsigned* slice_read) {
  void* p = align == 0 ? mi_malloc(r) : mi_malloc_aligned_at(r, align, 0);
  if (p == nullptr) return false;
  std::size_t direct = usable_from_page(p);
  bool same = direct == 0 || direct == mi_usable_size(p);
  same = same && slice_agrees(p);
  // Blocks the cache may take must mostly read as such (a layout that
  // reads none would "agree" and send every free out of line).
  if (align == 0 && mi_usable_size(p) <= kCacheMax && slice_cacheable(slice_of(p), page_size_field(slice_of(p))))
    ++*slice_read;
  *read += direct != 0;
  mi_free(p);
  return same;
}

// Blocks of a medium page (one of several slices; mimalloc 2.0.9: 16-128
// KiB blocks in 512 KiB pages), most of them starting in its interior
// slices: none reads as cacheable from its slice entry.
bool interior_slices_agree() {
  constexpr unsigned kBlocks = 24;
  void* b[kBlocks] = {};
  bool ok = true;
  for (unsigned i = 0; i < kBlocks && ok; ++i) {
    b[i] = mi_malloc(i < kBlocks / 2 ? 20000 : 60000);
    ok = b[i] != nullptr && slice_agrees(b[i]);
  }
  for (void* q : b) mi_free(q);
  return ok;
}

// Does page_used count this thread's blocks in a page? Two blocks of a
// class from one page: one more in use after the second malloc, one fewer
// after its free. Several classes; each must agree where the two blocks
// shared a page, and most must have.
bool used_count_agrees() {
  unsigned same_page = 0, tried = 0;
  for (std::size_t r = 32; r <= 4096; r *= 2, ++tried) {
    void* a = mi_malloc(r);
    void* b = mi_malloc(r);
    if (a == nullptr || b == nullptr) {
      mi_free(a);
      mi_free(b);
      return false;
    }
    const unsigned char* page = page_of(a);
    bool ok = true;
    if (page_of(b) == page) {
      ++same_page;
      const std::uint32_t both = page_used(page);
      mi_free(b);
      ok = both >= 2 && page_used(page) == both - 1;
    } else {
      mi_free(b);
    }
    mi_free(a);
    if (!ok) return false;
  }
  return same_page * 2 > tried;
}
}  // namespace

// The page records its owning heap where page_heap reads it: a block of
// this thread's default heap and one of a heap made for the check.
bool page_heaps_match() {
  void* a = mi_malloc(64);
  mi_heap_t* h = mi_heap_new();
  void* b = h != nullptr ? mi_heap_malloc(h, 64) : nullptr;
  const bool ok = a != nullptr && b != nullptr && page_heap(page_of(a)) == mi_heap_get_default() &&
                  page_heap(page_of(b)) == h && h != mi_heap_get_default();
  mi_free(b);
  if (h != nullptr) mi_heap_delete(h);
  mi_free(a);
  return ok;
}

bool page_sizes_match(std::size_t limit) {
  if (mi_version() != 209) return false;  // the layout is 2.0.9's
  if (!used_count_agrees() || !interior_slices_agree()) return false;
  unsigned plain = 0, read = 0, cacheable = 0, slice_read = 0;
  for (std::size_t r = kMinAlign; r <= limit; r += (r < 1024 ? kMinAlign : round_up(r / 8, kMinAlign)), ++plain) {
    if (!page_agrees(r, 0, &read, &slice_read)) return false;
    cacheable += r <= kCacheMax;
  }
  for (std::size_t align = 32; align <= 4096; align *= 2)
    if (!page_agrees(align * 3, align, &read, &slice_read)) return false;
  // Most plain blocks must have been read from their page: a layout that
  // reads 0 everywhere would "agree" and be useless.
  return page_agrees(limit, 0, &read, &slice_read) && read >= plain / 2 && slice_read >= cacheable / 2;
}

bool class_sizes_match(std::size_t limit) {
  for (std::size_t r = kMinAlign; r <= limit; r += (r < 1024 ? kMinAlign : round_up(r / 8, kMinAlign))) {
    void* p = mi_malloc(r);
    if (p == nullptr) return false;
    bool same = mi_usable_size(p) == mi_good_size(r);
    mi_free(p);
    if (!same) return false;
  }
  void* p = mi_malloc(limit);
  bool same = p != nullptr && mi_usable_size(p) == mi_good_size(limit);
  mi_free(p);
  return same;
}

// mimalloc 2.0.9's option defaults on Linux (src/options.c, in enum order):
// mi_option_set marks an option initialized, and mimalloc reads an option's
// MIMALLOC_* variable only while it is not, so setting every option to its
// default makes the environment invisible to it. There is no API for the
// defaults, hence the table; the assert catches a mimalloc with other options.
constexpr long kMiDefaults[] = {
    0,    // show_errors
    0,    // show_stats
    0,    // verbose
    1,    // eager_commit
    0,    // deprecated_eager_region_commit
    0,    // deprecated_reset_decommits
    0,    // large_os_pages
    0,    // reserve_huge_os_pages
    -1,   // reserve_huge_os_pages_at
    0,    // reserve_os_memory
    0,    // deprecated_segment_cache
    0,    // page_reset
    0,    // abandoned_page_decommit
    0,    // deprecated_segment_reset
    1,    // eager_commit_delay
    25,   // decommit_delay
    0,    // use_numa_nodes
    0,    // limit_os_alloc
    100,  // os_tag
    16,   // max_errors
    16,   // max_warnings
    8,    // max_segment_reclaim
    1,    // allow_decommit
    500,  // segment_decommit_delay
    1,    // decommit_extend_delay
    0,    // destroy_on_exit
};
static_assert(sizeof kMiDefaults / sizeof kMiDefaults[0] == _mi_option_last,
              "kMiDefaults must list every option of this mimalloc version");

void ignore_environment() {
  for (int i = 0; i < _mi_option_last; ++i) mi_option_set(static_cast<mi_option_t>(i), kMiDefaults[i]);
}

namespace {
std::atomic<bool> eager_commit_named{false};  // MIMALLOC_EAGER_COMMIT in the environment
std::atomic<bool> eager_commit_off{false};    // fit_data_limit turned it off
}  // namespace

void note_environment(const char* const* env, bool secure) {
  if (secure || env == nullptr) return;  // a secure process's environment names nothing
  // mimalloc compares the names without case (options.c, mi_getenv).
  static constexpr char kName[] = "MIMALLOC_EAGER_COMMIT=";
  for (; *env != nullptr; ++env)
    if (::strncasecmp(*env, kName, sizeof kName - 1) == 0) eager_commit_named.store(true, std::memory_order_relaxed);
}

void fit_data_limit(bool finite) {
  // Written only on a change: a process without a data limit never has
  // the option touched (other threads read it as a plain word).
  if (eager_commit_named.load(std::memory_order_relaxed) ||
      eager_commit_off.exchange(finite, std::memory_order_relaxed) == finite)
    return;
  mi_option_set(mi_option_eager_commit, finite ? 0 : kMiDefaults[mi_option_eager_commit]);
  // A block kept for good in the segment mapped now: emptied (configure's
  // mi_collect) it would be given back, and the next one mapped eagerly.
  static void* keeper = nullptr;
  if (finite && keeper == nullptr) keeper = mi_malloc(16);
}

namespace {
// trim_own's reads, checked on this mimalloc: a medium page taken from a
// heap of its own in the segment of a block of this thread's (kept, so the
// segment stays) is committed and not scheduled; once that heap is
// destroyed its span is scheduled for decommit, due within the delay.
// Where mimalloc decommits at once (MIMALLOC_DECOMMIT_DELAY=0) or never
// (allow_decommit off) nothing is scheduled: false, and nothing to do.
bool segment_spans_agree() {
  using namespace page_layout;
  if (!page_size_direct) return false;  // not 2.0.9, or its pages read otherwise
  void* keep = mi_malloc(64);
  mi_heap_t* h = mi_heap_new();
  void* p = h != nullptr ? mi_heap_malloc(h, 100 << 10) : nullptr;  // 2.0.9: a 512 KiB medium page
  const unsigned char* seg = segment_of(keep);
  const std::size_t unit = (reinterpret_cast<std::uintptr_t>(p) - reinterpret_cast<std::uintptr_t>(seg)) / kCommitUnit;
  bool ok = keep != nullptr && p != nullptr && segment_of(p) == seg &&
            seg_field<std::uintptr_t>(seg, kSegThreadAt) == own_thread_id() && seg_field<std::int32_t>(seg, kSegKindAt) == 0 &&
            seg_field<bool>(seg, kSegAllowDecommitAt) && mask_bit(seg, kSegCommitMaskAt, unit) &&
            !mask_bit(seg, kSegDecommitMaskAt, unit);
  if (h != nullptr) mi_heap_destroy(h);
  if (ok) {
    const auto due = seg_field<std::int64_t>(seg, kSegDecommitExpireAt);
    const auto now = static_cast<std::int64_t>(mi_now_ms());
    ok = mask_bit(seg, kSegDecommitMaskAt, unit) && mask_bit(seg, kSegCommitMaskAt, unit) && due > 0 && due <= now + 60'000 &&
         due + 60'000 >= now;
  }
  mi_free(keep);
  return ok;
}
}  // namespace

void configure() {
  page_size_direct = page_sizes_match(kClassExactMax);
  page_heap_known = page_size_direct && page_heaps_match();
  segment_spans_known = segment_spans_agree();
  class_exact_max = class_sizes_match(kClassExactMax) ? kClassExactMax : 0;
  // The checks touched a page of every size class (~300 KiB that stayed
  // resident in every process, the largest part of lowtide's fixed
  // footprint; docs/benchmarks.md): hand them back to mimalloc's OS layer.
  mi_collect(true);
  if (class_exact_max == 0) return;
  static_assert(kTableMax <= kClassExactMax && kTableMax <= UINT16_MAX);
  // Each entry must be a class of its own (fast_class asks mimalloc for the
  // class size, not the request), and a multiple of 16 (its blocks, carved
  // from 64 KiB-aligned pages, then keep glibc's 16-byte alignment).
  // Otherwise the table stays unverified (0) and malloc's fast path closed.
  for (std::size_t r = kMinAlign; r <= kTableMax; r += kMinAlign) {
    const std::size_t c = mi_good_size(r);
    if (c > UINT16_MAX || mi_good_size(c) != c || c % kMinAlign != 0) return;
  }
  for (std::size_t r = kMinAlign; r <= kTableMax; r += kMinAlign)
    class_table[r / kMinAlign] = static_cast<std::uint16_t>(mi_good_size(r));
  class_table[0] = class_table[1];
  class_table_ready = true;
}

}  // namespace lowtide::small
