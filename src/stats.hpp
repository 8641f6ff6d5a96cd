// Per-thread counters, always on. Each thread writes only its own slot, each
// update one unlocked add to memory (no lock, no atomic read-modify-write:
// bump); a reader may see a slot mid-update and gets a value at most one
// operation old. Slots live in memory lowtide maps itself, so they outlive their
// threads and can be read at exit.
#pragma once
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "state.hpp"
#include "thread_cache.hpp"

namespace lowtide::stats {

// The counters: the COUNTER rows of include/lowtide/lowtide_stats.def, in
// its order, named as the fields of struct lowtide_stats (stats::large_maps
// counts lowtide_stats.large_maps). The GAUGE rows are process-wide levels,
// read by stats_table.cpp.
#define LT_COUNTER_ROW_COUNTER(name) name,
#define LT_COUNTER_ROW_GAUGE(name)
enum Counter : unsigned {
#define LOWTIDE_STAT(name, kind, unit, object, key, pos, label, meaning) LT_COUNTER_ROW_##kind(name)
#include "lowtide/lowtide_stats.def"
#undef LOWTIDE_STAT
  kCounters
};
#undef LT_COUNTER_ROW_COUNTER
#undef LT_COUNTER_ROW_GAUGE

// By requested size: bucket i holds [2^(i-1), 2^i), bucket 0 the requests of
// 0. 64 buckets, so that every request counted (at most PTRDIFF_MAX, 63
// bits) has its own class: with 48, requests from 2^47 on (huge mallocs
// that fail, counted as calls) were clamped into [2^46, 2^47), a class
// their size is not in.
constexpr unsigned kHistBuckets = 64;

// A cache line of its own for each slot: threads never write a shared line.
struct alignas(64) Slot {
  std::uint64_t c[kCounters];
  std::uint64_t hist[kHistBuckets];
  // Registry fields, written under the registry lock.
  std::uint32_t tid;
  std::uint32_t alive;  // 1 (or kAliveKeep) until the thread's exit destructor ran
  std::uint64_t exited_ns;  // when it ran (for the fallback when tgkill is refused)
  char name[16];
  Slot* next;
  Slot* prev;  // on the list of living threads only (unlinked in O(1) at exit)
  // The thread's cache of freed small blocks, written by the thread alone
  // (through t_local.cache) until its exit destructor empties it.
  small::ThreadCache cache;
};

// Slot::alive of a slot attached under another pid than the registry's
// process (stats.cpp, attach): alive, and never taken for gone by a
// thread start's look at the living slots (reap_one_live).
constexpr std::uint32_t kAliveKeep = 2;

Slot* attach();  // slow path: this thread's first counted call

// A slot's counters and histogram as one consistent pass, while its owner
// may be counting (stats.cpp says how; reports and snapshots read this way).
void read_slot(const Slot* s, std::uint64_t* c, std::uint64_t* h);
// For tests only (null otherwise): called by read_slot in each pass between
// its first reading of the counters and the histogram (phase 0) and between
// the histogram and its second reading (phase 1), so that a test can count
// there as an owner outrunning the reader would.
extern void (*read_slot_hook)(const Slot* s, int pass, int phase);

// Counting can be compiled out (meson -Dcounters=false) only to measure what
// it costs; the shipped library always counts.
#ifdef LOWTIDE_NO_COUNTERS
inline constexpr bool kEnabled = false;
#else
inline constexpr bool kEnabled = true;
#endif

inline Slot* slot() {
  if constexpr (!kEnabled) return nullptr;
  Slot* s = t_local.stats;
  if (__builtin_expect(s != nullptr, 1)) return s;
  return attach();
}

// This thread's slot where it has one, never attaching (null before its
// first counted call, or with counting compiled out): for counting from
// inside mimalloc (the owner's trim runs in its page refill), where
// attach's registry lock and allocation must not run.
inline Slot* slot_if_attached() {
  if constexpr (!kEnabled) return nullptr;
  return t_local.stats;
}

// The small-block bytes this thread has handed out (0 before its first
// counted call, or with counting compiled out).
inline std::uint64_t thread_small_out() {
  const Slot* s = slot_if_attached();
  return s != nullptr ? __atomic_load_n(&s->c[small_out], __ATOMIC_RELAXED) : 0;
}

// This thread's errno: the address attach() cached (slot() has run), or a
// call when counting is compiled out and attach() never runs.
inline int* errno_of_attached() {
  if constexpr (!kEnabled) return &errno;
  return t_local.errno_ptr;
}

// c += v, where only this thread writes c and other threads read it with
// relaxed atomic loads. On x86-64 one `add` to memory without `lock`: its
// store is a single aligned 8-byte store, so readers see the old value or
// the new one, as with a relaxed atomic store, but the compiler makes one
// instruction of it instead of a load, an add and a store (it never fuses
// atomic operations), and a signal handler on this thread cannot land
// between the load and the store. volatile: bumps stay in program order
// (read_slot's check relies on a call being counted before its bucket).
inline void bump(std::uint64_t* c, std::uint64_t v) {
#if defined(__x86_64__)
  asm volatile("{addq %1, %0|add %0, %1}" : "+m"(*c) : "er"(v));  // AT&T | Intel syntax
#else
  __atomic_store_n(c, *c + v, __ATOMIC_RELAXED);
#endif
}

// large_returned_bytes is the sum of these parts (the reasons bytes went
// back) and is never counted itself: a reader derives it (add_counts in
// stats.cpp), so that no report can show parts that do not add up to it.
// While a give-back bumped both, one after the other, a report reading the
// thread between the two showed the whole without its part (docs/
// reliability.md no. 95). It also saves the give-back one add.
inline constexpr Counter kReturnedParts[] = {large_released_free, large_released_decay, large_released_demand,
                                             large_released_limit, large_released_room};

inline void add(Slot* s, Counter k, std::uint64_t v) {
  if constexpr (kEnabled) bump(&s->c[k], v);
}

// Byte counts that need a usable-size lookup: skipped entirely when
// counting is compiled out, so the comparison build does not pay for it.
template <typename UsableFn>
inline void add_usable(Slot* s, Counter k, UsableFn usable) {
  if constexpr (kEnabled) add(s, k, usable());
}

inline unsigned bucket_of(std::size_t n) {
  unsigned b = n == 0 ? 0u : 64u - static_cast<unsigned>(__builtin_clzll(n));
  return b < kHistBuckets ? b : kHistBuckets - 1;
}

// The index of the top set bit of x (x != 0), as a 64-bit index. On x86-64
// one bsr: GCC 12 computes 63 ^ clz in 32 bits and sign-extends it (cltq)
// before it can index, and cannot then fold the array's offset into the
// address (two instructions more in malloc's fast path).
inline std::uint64_t top_bit(std::uint64_t x) {
#if defined(__x86_64__)
  std::uint64_t i;
  asm("{bsrq %1, %0|bsr %0, %1}" : "=r"(i) : "rm"(x) : "cc");  // AT&T | Intel syntax
  return i;
#else
  return static_cast<unsigned>(63 ^ __builtin_clzll(x));
#endif
}

inline void count_request(Slot* s, Counter call, std::size_t n) {
  if constexpr (!kEnabled) return;
  add(s, call, 1);
  std::atomic_signal_fence(std::memory_order_release);  // the call first: see count_small_alloc
  bump(&s->hist[bucket_of(n)], 1);
}

// count_request taken back (operator new's nothrow forms hand a failed
// request to the C++ runtime, whose retry through the throwing form counts
// again).
inline void uncount_request(Slot* s, Counter call, std::size_t n) {
  if constexpr (!kEnabled) return;
  add(s, call, ~std::uint64_t{0});
  bump(&s->hist[bucket_of(n)], ~std::uint64_t{0});
}

// A small block of usable size u for a request of n bytes, counted as one
// `call` (the fast path counts before it allocates; uncount_small_alloc
// takes it back if mimalloc then fails).
inline void count_small_alloc(Slot* s, Counter call, std::size_t n, std::size_t u) {
  if constexpr (!kEnabled) return;
  add(s, call, 1);
  // The call before its bucket, which read_slot's consistency check relies
  // on. This orders the compiler only (no instruction): x86 keeps stores in
  // order; on a weakly ordered machine a live report may be off by one more
  // call in flight per thread.
  std::atomic_signal_fence(std::memory_order_release);
  // n is below the class table's end (8 KiB): its bucket needs no clamp.
  // bucket_of without the branch for 0: the bit length of n is the index of
  // the top bit of 2n+1 (0 for n = 0).
  bump(&s->hist[top_bit(2 * n + 1)], 1);
  add(s, small_requested, n);
  add(s, small_out, u);
}
inline void uncount_small_alloc(Slot* s, Counter call, std::size_t n, std::size_t u) {
  if constexpr (!kEnabled) return;
  add(s, call, ~std::uint64_t{0});
  bump(&s->hist[bucket_of(n)], ~std::uint64_t{0});
  add(s, small_requested, std::uint64_t{0} - n);
  add(s, small_out, std::uint64_t{0} - u);
}

// Process-wide large-path live bytes and their peak (large calls make a
// syscall anyway, so shared atomics cost nothing there).
void large_live_add(std::size_t bytes);
// For tests only (null otherwise): called by large_live_add between raising
// the live bytes and raising their peak, where a reader would see the two
// out of step (docs/reliability.md no. 94).
extern void (*large_live_hook)();
void large_live_sub(std::size_t bytes);
// When a thread last made its first counted call (pal::now_ns; 0: none
// yet but the first): the decay thread's sign that a pool came back after
// it gave back exited threads' pages (cache::note_thread_exit).
std::uint64_t last_thread_start_ns();
std::uint64_t large_live_now();  // large live bytes now
std::uint64_t large_peak_now();  // their peak so far (the sites' heap-at-peak copy)
// Both for a report: the peak never below the live value read with it.
void large_live_peak(std::uint64_t* live, std::uint64_t* peak);

// A report's own helpers (libdw naming frames, the demangler) allocate on
// the reporting thread, and their calls and bytes are not the program's
// (stats::OwnSpan below; docs/reliability.md no. 104). begin_own points
// the thread's counting at a scratch slot no reader sees; end_own points it
// back and adds to the thread's slot only what the process must still
// see: the blocks the helpers keep (live), and the bytes given back to the
// OS. Only additions: no counter a reader saw goes down. Not nested.
struct OwnScratch {
  Slot* real;                 // the thread's slot (attached by begin_own)
  small::ThreadCache* cache;  // and its cache, parked meanwhile
  std::uint8_t armed;         // t_local.cache_armed, 0 meanwhile
  Slot scratch;               // what the helpers counted meanwhile
};
void begin_own(OwnScratch* o);
void end_own(OwnScratch* o);

// One span of lowtide's own allocations on this thread, for a scope: a
// report's helpers (report.cpp) or lowtide's constructor (init.cpp,
// docs/reliability.md no. 125). From here to the scope's end: counting in
// the scratch slot (begin_own), no large peak raised and no site captured
// (t_local.in_report), the sampler's countdown kept. `on` false (a report
// that may not allocate), or a span already open on this thread (a signal
// handler's report inside one; sites::start inside the constructor's):
// nothing changes, the calls count where they would have.
class OwnSpan {
 public:
  explicit OwnSpan(bool on) : on_(on && t_local.in_report == 0) {
    if (!on_) return;
    begin_own(&own_);
    site_left_ = t_local.site_left;
    t_local.in_report = 1;
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  ~OwnSpan() {
    if (!on_) return;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_local.in_report = 0;
    t_local.site_left = site_left_;
    end_own(&own_);
  }
  OwnSpan(const OwnSpan&) = delete;
  OwnSpan& operator=(const OwnSpan&) = delete;

 private:
  bool on_;
  std::int64_t site_left_ = 0;
  OwnScratch own_{};  // (zeroed: also where the calls count as usual, !on_)
};

// --- reading ---------------------------------------------------------------

struct ThreadRow {
  std::uint32_t tid;
  bool alive;
  char name[16];
  std::uint64_t c[kCounters];
  std::uint64_t hist[kHistBuckets];
  std::uint32_t folded;  // >0: this row sums that many threads ("N other threads")
};

struct Snapshot {
  ThreadRow* rows;      // caller-provided storage
  std::size_t nrows;
  std::size_t cap;
  std::size_t threads_seen;  // rows in the registry (may exceed cap): living
                             // threads and the exited ones kept (stats.cpp)
  ThreadRow total;
  std::uint64_t large_live, large_peak;
  std::uint64_t small_cached;  // bytes in the registry's threads' small-block caches and on the shelves
  bool partial;  // a lock was held: read without it
};

std::size_t registry_size();
// Copy the registry into snap->rows (at most snap->cap rows; beyond that the
// smallest are folded into the last row). `try_only`: at exit, never wait.
void snapshot(Snapshot* snap, bool try_only);

// At first-call init: the thread-exit key, what empties an exiting
// thread's small-block cache, what tells the bytes one holds and the bytes
// on the shelves (small::cache_flush, small::cache_bytes,
// small::shelf_bytes; the registry does not call the small path itself),
// and what runs first in every exiting thread's key destructor, on that
// thread, given the small-block bytes the thread handed out in its life
// (cache::note_thread_exit; may be null).
void init(void (*flush_cache)(small::ThreadCache*), std::size_t (*cache_bytes)(const small::ThreadCache*),
          std::size_t (*shelf_bytes)(), void (*thread_exited)(std::uint64_t small_out));
void fork_prepare();
void fork_parent();
void fork_child();

}  // namespace lowtide::stats
