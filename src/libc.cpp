#include "libc.hpp"

#include <cerrno>
#include <climits>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <new>

#include "cxxrt.hpp"
#include "forward.hpp"
#include "init.hpp"
#include "large_cache.hpp"
#include "large_path.hpp"
#include "mem_limit.hpp"
#include "route.hpp"
#include "log.hpp"
#include "parse.hpp"
#include "platform.hpp"
#include "size_math.hpp"
#include "small_path.hpp"
#include "report.hpp"
#include "stats.hpp"
#include "stats_table.hpp"

namespace lowtide::libc {

namespace {

#define LT_LIKELY(x) __builtin_expect(!!(x), 1)
#define LT_UNLIKELY(x) __builtin_expect(!!(x), 0)

// --- forwarding mode: lowtide lost the symbol race --------------------------

// A pointer the winner made (not one of ours from before the race was known).
bool winners(const void* p) { return !large::space.arena.contains(p) && !small::owns(p); }

void* fwd_realloc(void* p, std::size_t n) {
  if (p == nullptr || winners(p)) return forward::winner.realloc(p, n);
  std::size_t old = large::space.arena.contains(p) ? large::usable(p, "realloc()") : small::usable(p);
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

void flush_thread_cache() {
  if (small::ThreadCache* tc = t_local.cache; small::cache_is_open(tc)) {
    // Parked while it is emptied, as stats::close_cache does: a signal
    // handler's malloc in between would pop a block the flush then frees.
    // Its calls meanwhile go uncached (and are counted as usual).
    t_local.cache = kParkedCache;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    small::cache_flush(tc);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    t_local.cache = tc;
  }
  small::shelf_flush();
}

void* malloc_slow(std::size_t n) {
  if (LT_UNLIKELY(mode() == kForwarding)) return forward::winner.malloc(n);
  return route::allocate(n, kMinAlign, Origin::malloc, stats::malloc_calls, false);
}

void uncount_small_fast(std::size_t n, stats::Counter call) {
  stats::uncount_small_alloc(t_local.stats, call, n, small::fast_class(n));
}

void free_keep_errno(void* p) {
  // The thread's errno address was cached with its slot: no
  // __errno_location call.
  int* err = stats::errno_of_attached();
  const int saved = *err;
  route::release(p, "free()");
  *err = saved;
}

void open_thread_cache(stats::Slot* st) {
  st->cache.heap = small::thread_heap();
  small::cache_reset_caps(&st->cache);
  t_local.cache = &st->cache;  // (already: stats::attach)
  __atomic_store_n(&st->cache.take_below, small::kTakeBelowOpen, __ATOMIC_RELAXED);  // last: free may take blocks
}

void free_arming(stats::Slot* st, void* p, const unsigned char* page) {
  if (small::cache_on && st->c[stats::free_calls] >= small::kCacheWarm) open_thread_cache(st);
  if (small::page_used(page) >= 2) return small::release(p);
  release_keep_errno(p);
}

void free_not_cached(void* p, small::ThreadCache* tc) {
  // A thread without a slot yet: counted into the parked slot, counted
  // here for real (free_slow makes the slot).
  if (LT_UNLIKELY(tc == kParkedCache)) return free_uncached(p);
  const unsigned char* page = small::page_of(p);
  if (const std::uint32_t u = small::page_block_size(page); LT_LIKELY(u != 0)) {
    stats::Slot* st = slot_of(tc);
    stats::add(st, stats::small_freed, u);
    // Closed: a thread not warm yet opens its cache on the way (from its
    // next free on).
    if (LT_UNLIKELY(t_local.cache_armed != 0) && !small::cache_is_open(tc)) return free_arming(st, p, page);
    // mimalloc, sure to make no system call where the page keeps another
    // block in use (small_path.hpp): errno stays as it is without saving it.
    if (LT_LIKELY(small::page_used(page) >= 2)) return small::release(p);
    return release_keep_errno(p);
  }
  free_keep_errno(p);
}

void free_to_shelf(void* p, small::ThreadCache* tc) {
  const unsigned char* page = small::slice_of(p);
  const unsigned b = small::cache_bin[small::page_size_field(page) / kMinAlign];
  small::cache_give_room_back(tc, b);  // (the fast path took it: none was left)
  if (b == 0) {  // a class not cached
    if (small::page_used(page) >= 2) return small::release(p);
    return release_keep_errno(p);
  }
  if (small::cache_is_head(tc, b, p)) small::cache_double_free(p);
  if (small::cache_grow(tc, b)) return small::cache_put(tc, b, p);
  if (small::shelf_wanted(tc, page) && small::shelf_give(tc, b)) return small::cache_put(tc, b, p);
  if (small::page_used(page) >= 2) return small::release(p);
  release_keep_errno(p);
}

namespace {

// The miss functions' common part: a bin from the shelf (a thread with no
// cache opening one if it is warm), else mimalloc; NULL with the counts
// taken back.
void* small_miss(stats::Slot* st, std::size_t n, std::size_t u) {
  if constexpr (stats::kEnabled)  // (no thread cache without counting: nothing shelved)
    if (LT_UNLIKELY(small::shelf_has(u))) {
      small::ThreadCache* tc = t_local.cache;
      if (!small::cache_is_open(tc) && t_local.cache_armed != 0 && small::cache_on &&
          st->c[stats::malloc_calls] >= small::kCacheWarm) {
        open_thread_cache(st);
        tc = t_local.cache;
      }
      if (small::cache_is_open(tc))
        if (void* h = small::shelf_take(tc, u)) return h;
    }
  void* p = small::allocate_class(u);
  if (LT_UNLIKELY(p == nullptr)) uncount_small_fast(n, stats::malloc_calls);
  return p;
}

}  // namespace

void* malloc_miss(stats::Slot* st, std::size_t n, std::size_t u) {
  if (void* p = small_miss(st, n, u); LT_LIKELY(p != nullptr)) return p;
  return malloc_slow(n);
}

void* new_miss(stats::Slot* st, std::size_t n, std::size_t u, bool nothrow) {
  if (void* p = small_miss(st, n, u); LT_LIKELY(p != nullptr)) return p;
  return operator_new_slow(n, 0, nothrow);
}

// (The parked cache: a thread without a slot yet, counted into the parked
// slot; counted here for real, its slot made.)
void* malloc_miss_cached(small::ThreadCache* tc, std::size_t n, std::size_t u) {
  if (LT_UNLIKELY(tc == kParkedCache)) return malloc_uncached(n);
  return malloc_miss(slot_of(tc), n, u);
}

void* new_miss_cached(small::ThreadCache* tc, std::size_t n, std::size_t u, bool nothrow) {
  if (LT_UNLIKELY(tc == kParkedCache)) return new_uncached(n, nothrow);
  return new_miss(slot_of(tc), n, u, nothrow);
}

void* malloc_uncached(std::size_t n) {
  if (stats::Slot* st = t_local.stats; !stats::kEnabled || LT_LIKELY(st != nullptr)) {
    const std::size_t u = small::fast_class(n);
    stats::count_small_alloc(st, stats::malloc_calls, n, u);
    return malloc_miss(st, n, u);
  }
  return malloc_slow(n);
}

void* new_uncached(std::size_t n, bool nothrow) {
  if (stats::Slot* st = t_local.stats; !stats::kEnabled || LT_LIKELY(st != nullptr)) {
    const std::size_t u = small::fast_class(n);
    stats::count_small_alloc(st, stats::malloc_calls, n, u);
    return new_miss(st, n, u, nothrow);
  }
  return operator_new_slow(n, 0, nothrow);
}

void free_uncached(void* p) {
  stats::Slot* st = t_local.stats;
  if (stats::kEnabled && LT_UNLIKELY(st == nullptr)) return free_slow(p);
  stats::add(st, stats::free_calls, 1);
  // (Read with counting compiled out too: the errno decision needs it.)
  const unsigned char* page = small::page_of(p);
  if (const std::uint32_t u = small::page_block_size(page); LT_LIKELY(u != 0)) {
    stats::add(st, stats::small_freed, u);
    if (LT_UNLIKELY(t_local.cache_armed != 0)) return free_arming(st, p, page);
    if (LT_LIKELY(small::page_used(page) >= 2)) return small::release(p);
    return release_keep_errno(p);
  }
  free_keep_errno(p);
}

void release_keep_errno(void* p) {
  int* err = stats::errno_of_attached();
  const int saved = *err;
  small::release(p);
  *err = saved;
}

void free_slow(void* p) {
  int* err = &errno;  // one __errno_location call, not two
  int saved = *err;
  if (LT_UNLIKELY(g.mode.load(std::memory_order_relaxed) == kForwarding) && winners(p)) {
    forward::winner.free(p);
  } else {
    stats::add(stats::slot(), stats::free_calls, 1);
    route::release(p, "free()");
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
  return route::allocate(total, kMinAlign, Origin::calloc, stats::calloc_calls, true);
}

void* realloc_slow(void* p, std::size_t n) {
  if (p == nullptr) {
    if (LT_UNLIKELY(mode() == kForwarding)) return forward::winner.malloc(n);
    return route::allocate(n, kMinAlign, Origin::realloc, stats::realloc_calls, false);
  }
  if (LT_UNLIKELY(mode() == kForwarding)) return fwd_realloc(p, n);
  if (n == 0) {  // glibc: frees, returns NULL, errno unchanged
    int saved = errno;
    stats::count_request(stats::slot(), stats::realloc_calls, 0);
    route::release(p, "realloc()");
    errno = saved;
    return nullptr;
  }
  if (n > kMaxRequest) {
    errno = ENOMEM;
    return nullptr;
  }
  stats::Slot* st = stats::slot();
  stats::count_request(st, stats::realloc_calls, n);
  return route::resize(p, n, st);
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
  return route::allocate(n, effective_alignment(align), Origin::aligned, stats::aligned_calls, false);
}

int posix_memalign(void** out, std::size_t align, std::size_t n) {
  if (align % sizeof(void*) != 0 || !is_pow2(align / sizeof(void*))) return EINVAL;
  if (LT_UNLIKELY(mode() == kForwarding)) return forward::winner.posix_memalign(out, align, n);
  int saved = errno;
  void* p = route::allocate(n, effective_alignment(align), Origin::aligned, stats::aligned_calls, false);
  if (p == nullptr) {
    errno = saved;
    return ENOMEM;
  }
  *out = p;
  return 0;
}

void* valloc(std::size_t n) { return memalign(pal::kPageSize, n); }

// glibc's pvalloc hands out n rounded up to a whole page (a page for 0),
// all of it usable; the program asked for n, which is what the counters'
// bytes requested and the histogram show (up to 2026-12-07 the rounded
// size: pvalloc(1) counted 4096 bytes requested).
void* pvalloc(std::size_t n) {
  std::size_t rounded;
  if (__builtin_add_overflow(n, pal::kPageSize - 1, &rounded)) {
    errno = ENOMEM;
    return nullptr;
  }
  rounded &= ~(pal::kPageSize - 1);
  if (rounded == 0) rounded = pal::kPageSize;
  if (LT_UNLIKELY(mode() == kForwarding)) return forward::winner.memalign(pal::kPageSize, rounded);
  return route::allocate(rounded, n, effective_alignment(pal::kPageSize), Origin::aligned, stats::aligned_calls, false);
}

std::size_t usable_size(const void* p) {
  if (p == nullptr) return 0;
  if (large::space.arena.contains(p)) return large::usable(p, "malloc_usable_size()");
  if (LT_UNLIKELY(g.mode.load(std::memory_order_relaxed) == kForwarding) && !small::owns(p))
    return forward::winner.usable(const_cast<void*>(p));
  return small::usable(p);
}

std::size_t good_size(std::size_t n) {
  if (n > kMaxRequest) return n;
  if (n < route::settings.cutoff) return small::good_size(n);
  std::size_t hdr = sizeof(BlockHeader);
  if (n > kMaxRequest - Arena::kGranule) return n;
  return round_up(n + hdr, Arena::kGranule) - hdr;
}

void* operator_new_aligned(std::size_t n, std::size_t align, bool nothrow) {
  if (LT_UNLIKELY(align == 0 || (align & (align - 1)) != 0)) {
    if (nothrow) return nullptr;
    cxxrt::throw_bad_alloc();
  }
  return operator_new(n, align, nothrow);
}

void* operator_new_slow(std::size_t n, std::size_t align, bool nothrow) {
  for (;;) {
    void* p;
    if (LT_UNLIKELY(mode() == kForwarding)) p = align == 0 ? forward::winner.malloc(n) : memalign(align, n);
    else if (align == 0) p = route::allocate(n, kMinAlign, Origin::new_op, stats::malloc_calls, false);
    else if (align > SIZE_MAX / 2 + 1) p = nullptr;
    else p = route::allocate(n, effective_alignment(align), Origin::new_op, stats::aligned_calls, false);
    if (LT_LIKELY(p != nullptr)) return p;
    // The handler and the exception are the program's C++ runtime's
    // (cxxrt.hpp: lowtide links none and is built without exceptions).
    std::new_handler h = cxxrt::new_handler();
    if (h == nullptr) {
      if (nothrow) return nullptr;
      cxxrt::throw_bad_alloc();
    }
    if (nothrow) {
      // A handler may throw; the nothrow forms must then return NULL. The
      // runtime's nothrow new retries through our throwing form inside the
      // try/catch lowtide cannot compile. That form counts each attempt,
      // this one included: its count here is taken back first. (A throw
      // inside the runtime allocates its exception object: one more small
      // malloc in the counters, as under any allocator.)
      const bool counted = mode() != kForwarding && n <= kMaxRequest && align <= SIZE_MAX / 2 + 1;
      const stats::Counter call = align == 0 ? stats::malloc_calls : stats::aligned_calls;
      if (counted) stats::uncount_request(stats::slot(), call, n);
      bool called = false;
      void* q = cxxrt::nothrow_new(n, align, &called);
      if (called) return q;
      if (counted) stats::count_request(stats::slot(), call, n);
    }
    h();  // throws out of the throwing forms, through frames without handlers
  }
}

namespace {
// Whether an mprotect or pkey_mprotect of [p, p + len) covers part of
// lowtide's range. One of length 0 covers nothing: the kernel returns 0
// before it looks at the range or the key (where p is page-aligned; it
// refuses p otherwise), so taking it for one that reached the range would
// make every later free pay an mprotect, or, with a key on a CPU without
// keys, turn the reuse cache off, for a call that changed nothing
// (reliability.md no. 100). Not mlock's test: mlock(p, 0) with p not
// page-aligned locks p's page.
bool protect_reaches_range(const void* p, std::size_t len) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const Arena& r = large::space.arena;
  return len != 0 && r.ready() && a < r.base() + r.size() && a + len > r.base();
}
}  // namespace

int mlock2(const void* p, std::size_t len, unsigned flags) {
  // Only a lock on the range can cover a large block (mremap keeps a
  // mapping's lock; a commit is a new, unlocked mapping): libsodium's or
  // OpenSSL's locked pages elsewhere leave growth by mremap on.
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const Arena& r = large::space.arena;
  if (r.ready() && a < r.base() + r.size() && a + len > r.base()) pal::note_locked();
  return pal::mlock2(p, len, flags);
}

// Only a call that reaches the range and leaves something other than
// read-write can make a freed block unsafe to hand out again (a JIT's code
// buffer, a guard page, a key); flagged before the call, so that a free
// ordered after it by the program sees the flag (pal::writable_again).
int mprotect(void* p, std::size_t len, int prot) {
  if (prot != (PROT_READ | PROT_WRITE) && protect_reaches_range(p, len)) pal::note_protected(false);
  return pal::mprotect(p, len, prot);
}

int pkey_mprotect(void* p, std::size_t len, int prot, int pkey) {
  const bool keyed = pkey != -1 && pkey != 0;
  const bool flag = (prot != (PROT_READ | PROT_WRITE) || keyed) && protect_reaches_range(p, len);
  if (flag) pal::note_protected(false);
  const int r = pal::pkey_mprotect(p, len, prot, pkey);
  // Keyed only once a key may have been given: not where the kernel refused
  // the call before changing anything (EINVAL: a key not allocated, or a
  // CPU without keys, where even key 0 is refused and writable_again's
  // reset would then fail for every block; ENOSYS: no such system call).
  // Before the call returns, so a free the program orders after it sees it.
  if (flag && keyed && (r == 0 || (errno != EINVAL && errno != ENOSYS))) pal::note_protected(true);
  return r;
}

int prlimit(int pid, int resource, const struct rlimit* new_limit, struct rlimit* old_limit) {
  // The range reserved at start-up (1 TiB by default: PROT_NONE, nothing
  // committed) counts in full against an address-space limit. Set before
  // lowtide starts (ulimit -v), it is reserved at an eighth of the limit
  // (init.cpp); set while the process runs (Python's
  // resource.setrlimit(RLIMIT_AS, ...), a test harness, a worker capping
  // itself at a few GiB), every later mmap was refused, mimalloc's too:
  // small blocks failed after ~30 MiB under a limit of 4 GiB
  // (reliability.md no. 103). So where the range alone is larger than the
  // new limit (no program can have meant to count it then), its free tail
  // is cut to the same eighth first, keeping every extent in use. A limit
  // above the range is left to mean what it says: one set from the
  // process's address space as it is (what is mapped now, plus some),
  // counting the range, would otherwise get the range's space on top and
  // limit nothing (security/report_oom caps the address space at what is
  // mapped and allocates until refused). Only the process's own limit, and
  // only its soft value (what the kernel checks); cut even if the call is
  // then refused (a hard limit raised without the right), which costs
  // only range.
  if (resource == RLIMIT_AS && new_limit != nullptr && new_limit->rlim_cur != RLIM_INFINITY &&
      (pid == 0 || pid == ::getpid()) && large::space.arena.ready() &&
      large::space.arena.size() > new_limit->rlim_cur)
    large::space.arena.shrink_to(static_cast<std::size_t>(new_limit->rlim_cur / 8));
  const int r = pal::prlimit(pid, resource, new_limit, old_limit);
  // A data limit: commits over the range are checked against it from now
  // on (pal::note_data_limit), read again whether or not the call worked.
  // (mimalloc's eager commit is left as it is: init.cpp, small::fit_data_limit.)
  if (resource == RLIMIT_DATA && new_limit != nullptr && (pid == 0 || pid == ::getpid())) pal::note_data_limit();
  return r;
}

int mlockall(int flags) {
  // From here frees release PROT_NONE; those already re-mapping read-write
  // finish first, so that protect_free finds what they released, and so
  // that none maps a run read-write after MCL_FUTURE is in force (the
  // kernel would populate and lock it).
  pal::mlockall_begin();
  if (large::space.arena.ready()) {
    // Cached blocks are used, read-write extents (protect_free covers only
    // free ones): MCL_CURRENT would populate and lock every page of them.
    // Given back now, they are released PROT_NONE (mlockall_begin).
    if ((flags & MCL_CURRENT) != 0) cache::purge(true);
    if ((flags & (MCL_CURRENT | MCL_FUTURE)) != 0) large::space.arena.wait_give_backs();
    if ((flags & MCL_CURRENT) != 0) large::space.arena.protect_free(pal::decommit);
  }
  return pal::mlockall(flags);
}

void* reallocf(void* p, std::size_t n) {
  // realloc(p, 0) has already freed it.
  void* q = realloc(p, n);
  if (q == nullptr && p != nullptr && n != 0) free(p);
  return q;
}

int reallocarr(void* pp, std::size_t n, std::size_t size) {
  if (pp == nullptr) return EINVAL;
  void** slot = static_cast<void**>(pp);
  int saved = errno;
  if (n == 0 || size == 0) {
    free(*slot);
    *slot = nullptr;
    return 0;
  }
  void* q = reallocarray(*slot, n, size);
  if (q == nullptr) {
    int e = errno;
    errno = saved;
    return e;
  }
  *slot = q;
  return 0;
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
  // (The collect below calls it too, through small::on_forced_collect; here
  // as well because a program of its own may replace that hook, and a
  // thread whose mimalloc heap is not set up gets no call.)
  flush_thread_cache();
  // mimalloc's collect pops its abandoned segments, raising a reader count
  // a fork child would inherit and spin on: not across a fork.
  limit::collect_guarded(&small::collect);
  std::size_t after = pal::rss_bytes();
  // (0: statm not read, pal::read_file: then only what the cache gave back
  // counts.)
  return (cached != 0 || (after != 0 && after < before)) ? 1 : 0;
}

// glibc's fields (malloc.c, int_mallinfo) in lowtide's terms: the small
// path is glibc's arena (arena = uordblks + fordblks: what it holds, in use
// and free), the large path its mmapped chunks (hblks, hblkhd: the live ones
// only), keepcost what malloc_trim gives back. Programs read uordblks (or
// uordblks + hblkhd) as the heap in use: until 2026-12-06 uordblks was the
// large path's mapped bytes (0 with 96 MiB of small blocks live, the reuse
// cache's bytes after every block was freed) and hblkhd counted the cache.
struct mallinfo2 info() {
  struct mallinfo2 m;
  std::memset(&m, 0, sizeof m);
  std::size_t commit = 0, peak_commit = 0;
  small::committed(&commit, &peak_commit);
  stats::Snapshot snap{};
  snap.rows = nullptr;  // totals only, as lowtide_get_stats
  snap.cap = 0;
  stats::snapshot(&snap, false);
  const std::uint64_t out = snap.total.c[stats::small_out], freed = snap.total.c[stats::small_freed];
  const std::size_t used = out > freed ? static_cast<std::size_t>(out - freed) : 0;
  m.uordblks = used;                                   // usable bytes of live small blocks
  m.arena = commit > used ? commit : used;             // bytes mimalloc has committed
  m.fordblks = m.arena - used;                         // of those, not in a live block
  m.hblks = large::space.blocks.load(std::memory_order_relaxed);
  m.hblkhd = snap.large_live;                          // usable bytes of live large blocks
  m.keepcost = cache::cached_bytes();                  // the reuse cache: malloc_trim's to give back
  m.usmblks = peak_commit;
  return m;
}

struct mallinfo info_int() {
  struct mallinfo2 m2 = info();
  auto sat = [](std::size_t v) { return v > static_cast<std::size_t>(INT_MAX) ? INT_MAX : static_cast<int>(v); };
  struct mallinfo m;
  m.arena = sat(m2.arena);
  m.ordblks = sat(m2.ordblks);
  m.smblks = sat(m2.smblks);
  m.hblks = sat(m2.hblks);
  m.hblkhd = sat(m2.hblkhd);
  m.usmblks = sat(m2.usmblks);
  m.fsmblks = sat(m2.fsmblks);
  m.uordblks = sat(m2.uordblks);
  m.fordblks = sat(m2.fordblks);
  m.keepcost = sat(m2.keepcost);
  return m;
}

void exit_now(int status) {
  // A process that leaves through _exit (a forked multiprocessing worker's
  // os._exit) runs no destructors: report first, then leave.
  report::at_exit(true);
  for (;;) syscall(SYS_exit_group, status);
}

void print_stats() { report::write("stderr", report::kText); }

int print_info(int options, FILE* fp) {
  // glibc's contract: the error is the return value, errno untouched.
  if (options != 0) return EINVAL;
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
  flush_thread_cache();  // (as in trim: not left to the collect's hook)
  // mimalloc's collect pops its abandoned segments, raising a reader count
  // a fork child would inherit and spin on: not across a fork.
  limit::collect_guarded(&small::collect);
  std::size_t after = pal::rss_bytes();
  return after != 0 && after < before ? before - after : 0;  // (0: not read)
}

}  // namespace lowtide::libc
