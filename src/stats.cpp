#include "stats.hpp"

#include <atomic>
#include <cstring>
#include <initializer_list>
#include <pthread.h>
#include <unistd.h>

#include "log.hpp"
#include "platform.hpp"

namespace lowtide::stats {

namespace {

// The registry (everything here under mu). A slot is in exactly one place:
//
//   live      threads that have not exited: a doubly linked list, so a
//             thread's exit unlinks its slot in O(1)
//   exiting   threads whose exit destructor ran but which may still be
//             tearing themselves down (later TLS and key destructors,
//             glibc's own thread cleanup) and so may still allocate and
//             write their slot: a FIFO, a few entries checked per start
//   kept      the kKeepExited heaviest threads that are gone for good, by
//             bytes handed out: a min-heap, so the lightest is found in O(1)
//             and replaced in O(log n); their rows stay in the report
//   retired   the sum of every other gone thread's counters (one slot's
//             worth of memory, however many threads)
//   spare     slots given back, ready for new threads
//   carve     the newest chunk's slots never handed out yet (a range, not
//             a list: take_slot carves them one at a time)
//
// A slot leaves `exiting` only once the kernel has released its thread
// (pal::thread_state; see gone()), so no late write of that thread can land in a slot
// handed to another: the counters stay exact. A thread's start and exit do a
// bounded amount of work here (no walk over the registry, no file read), and
// the slots in use are bounded by the threads alive at once, those still
// exiting and kKeepExited, not by how many threads ever ran.
constexpr std::size_t kKeepExited = 256;  // the report shows 256 rows at most
// Entries of `exiting` a thread start checks: more than one, so the list
// drains faster than the one exit per start that can add to it. Each check
// is one syscall, so none are made while the list is this short or shorter:
// the entries checked are then at least that many exits old, so nearly
// always gone (a thread just joined is often not yet released), and a start
// right after a few exits pays nothing.
constexpr unsigned kChecksPerStart = 2;
constexpr std::size_t kExitingSlack = 16;
constexpr std::size_t kChunkSlots = 64;

pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
Slot* live = nullptr;  // newest first
Slot* exiting = nullptr;  // oldest first
Slot* exiting_tail = nullptr;
std::size_t nlive = 0, nexiting = 0;
Slot* kept[kKeepExited];  // min-heap by weight()
std::size_t nkept = 0;
std::size_t nrows = 0;    // nlive + nexiting + nkept, read unlocked by registry_size
std::size_t nmapped = 0;  // slots ever mapped: bounds a walk made without mu
Slot* spare = nullptr;    // slots given back, ready for new threads
// The newest chunk's slots not handed out yet, [carve, carve_end): carved
// one at a time, so that a chunk's pages are touched as its slots are used
// (linking all 64 at once wrote ~100 KiB at the first call of every
// process: 18 page faults measured on /bin/true).
Slot* carve = nullptr;
Slot* carve_end = nullptr;
Slot retired{};           // counters of gone threads not kept
std::uint64_t retired_threads = 0;
pthread_key_t exit_key;
bool have_key = false;
void (*flush_cache)(small::ThreadCache*) = nullptr;  // init's: the small path's cache_flush
void (*thread_exited)(std::uint64_t) = nullptr;     // init's: cache::note_thread_exit
std::size_t (*shelf_bytes)() = nullptr;  // init's: the small path's shelf_bytes
std::size_t (*cache_bytes)(const small::ThreadCache*) = nullptr;  // and its cache_bytes

std::atomic<std::uint64_t> large_live{0};
std::atomic<std::uint64_t> large_peak{0};

// Only for slots whose thread is gone: nothing writes them any more.
std::uint64_t weight(const Slot* s) { return s->c[small_out] + s->c[large_out]; }

void read_name(std::uint32_t tid, char* out) {
  char path[64];
  auto r = fmt::format_to_n(path, sizeof path - 1, "/proc/self/task/{}/comm", tid);
  path[r.size] = '\0';
  char buf[32];
  long n = pal::read_file(path, buf, sizeof buf);
  if (n <= 0) return;
  if (buf[n - 1] == '\n') buf[n - 1] = '\0';
  const std::size_t len = strnlen(buf, 15);  // comm is at most 15 characters
  std::memcpy(out, buf, len);
  out[len] = '\0';
}

void fold_into(Slot* dst, const Slot* src) {
  for (unsigned i = 0; i < kCounters; ++i) dst->c[i] += src->c[i];
  for (unsigned i = 0; i < kHistBuckets; ++i) dst->hist[i] += src->hist[i];
}

void publish_rows() { __atomic_store_n(&nrows, nlive + nexiting + nkept, __ATOMIC_RELAXED); }

void push_live(Slot* s) {
  s->prev = nullptr;
  s->next = live;
  if (live != nullptr) live->prev = s;
  live = s;
  ++nlive;
}

// The next living slot a thread start looks at (reap_one_live): a cursor
// that walks the list one slot per start, from the newest back to the
// oldest and round again.
Slot* live_look = nullptr;

void unlink_live(Slot* s) {
  if (live_look == s) live_look = s->next;
  if (s->prev != nullptr) s->prev->next = s->next;
  else live = s->next;
  if (s->next != nullptr) s->next->prev = s->prev;
  s->next = s->prev = nullptr;
  --nlive;
}

void push_exiting(Slot* s) {
  s->next = nullptr;
  s->prev = nullptr;
  if (exiting_tail != nullptr) exiting_tail->next = s;
  else exiting = s;
  exiting_tail = s;
  ++nexiting;
}

Slot* pop_exiting() {
  Slot* s = exiting;
  exiting = s->next;
  if (exiting == nullptr) exiting_tail = nullptr;
  s->next = nullptr;
  --nexiting;
  return s;
}

void free_slot(Slot* s) {
  std::memset(static_cast<void*>(s), 0, sizeof *s);
  s->next = spare;
  spare = s;
}

void retire(Slot* s) {
  fold_into(&retired, s);
  ++retired_threads;
  free_slot(s);
}

void sift_down(std::size_t i) {
  for (;;) {
    std::size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < nkept && weight(kept[l]) < weight(kept[m])) m = l;
    if (r < nkept && weight(kept[r]) < weight(kept[m])) m = r;
    if (m == i) return;
    Slot* t = kept[i];
    kept[i] = kept[m];
    kept[m] = t;
    i = m;
  }
}

// A slot whose thread is gone for good: kept if it is among the
// kKeepExited heaviest, else folded into `retired` (the lightest kept one
// makes way for a heavier newcomer).
void keep_or_retire(Slot* s) {
  if (nkept < kKeepExited) {
    std::size_t i = nkept++;
    kept[i] = s;
    while (i > 0 && weight(kept[(i - 1) / 2]) > weight(kept[i])) {
      Slot* t = kept[i];
      kept[i] = kept[(i - 1) / 2];
      kept[(i - 1) / 2] = t;
      i = (i - 1) / 2;
    }
    return;
  }
  if (weight(s) > weight(kept[0])) {
    Slot* lightest = kept[0];
    kept[0] = s;
    sift_down(0);
    s = lightest;
  }
  retire(s);
}

// Move the oldest exiting threads that are gone to kept/retired; one still
// there goes to the back (a thread that never finishes exiting, such as a
// main thread that called pthread_exit, must not hold up the others). The
// list keeps kExitingSlack entries unchecked.
// Where the kernel will not answer (tgkill refused by a sandbox), a thread
// that exited this long ago is taken as gone: the rule before tgkill, which
// a thread still tearing itself down after 2 s could break (a write to a
// reused slot: a count misattributed, never memory misused).
constexpr std::uint64_t kAssumeGoneNs = 2'000'000'000;

bool gone(const Slot* s) {
  switch (pal::thread_state(g.pid, static_cast<int>(s->tid))) {
    case pal::ThreadState::gone: return true;
    case pal::ThreadState::alive: return false;
    case pal::ThreadState::unknown: break;
  }
  const std::uint64_t now = pal::now_ns();
  return now > s->exited_ns && now - s->exited_ns >= kAssumeGoneNs;
}

void settle_exiting() {
  if (nexiting <= kExitingSlack) return;
  static_assert(kExitingSlack >= kChecksPerStart, "each entry is checked at most once per start");
  for (unsigned i = 0; i < kChecksPerStart; ++i) {
    Slot* s = pop_exiting();
    if (g.pid != 0 && gone(s)) keep_or_retire(s);
    else push_exiting(s);
  }
}

// A living slot whose thread is gone without its exit destructor: the
// thread's first call came in the last round of key destructors (another
// key's destructor that allocates, set again round after round), and
// glibc runs them PTHREAD_DESTRUCTOR_ITERATIONS (4) rounds at most, so the
// key attach set in the fourth never ran on_thread_exit. Such a slot was
// alive in every report and never recycled, and its cache, once opened,
// kept up to its caps of blocks for good (50 such threads: 50 rows
// "alive", 200 KiB cached). No code of the thread can tell it is in that
// round, so each start looks at one living slot, a cursor walking the
// list: one tgkill. A thread the kernel has released writes nothing more,
// so its cache is emptied here (its blocks to mimalloc from this thread,
// as any cross-thread free) and its slot settles as an exited one's. Not
// the main thread's (its tid stays the process's until the end), nor a
// slot attached under another pid (kAliveKeep: a vfork child that
// allocated first in its parent's TLS recorded its own tid, which is gone
// once it execs while its parent counts on in the slot).
void reap_one_live() {
  Slot* s = live_look != nullptr ? live_look : live;
  if (s == nullptr) return;
  live_look = s->next;
  if (s->alive != 1 || s->tid == 0 || s->tid == static_cast<std::uint32_t>(g.pid)) return;
  if (pal::thread_state(g.pid, static_cast<int>(s->tid)) != pal::ThreadState::gone) return;
  unlink_live(s);
  if (__atomic_load_n(&s->cache.take_below, __ATOMIC_RELAXED) != 0) {
    __atomic_store_n(&s->cache.take_below, 0, __ATOMIC_RELAXED);
    if (flush_cache != nullptr) flush_cache(&s->cache);
  }
  s->alive = 0;
  s->exited_ns = pal::now_ns();
  keep_or_retire(s);
}

// Under mu: a slot for a new thread. own_process: the caller's pid is the
// registry's (not a vfork child, nor a child made without fork's
// handlers, whose g.pid is its parent's): only then are tids of g.pid's
// asked about.
Slot* take_slot(bool own_process) {
  settle_exiting();
  if (own_process && g.pid != 0) reap_one_live();
  if (spare != nullptr) {
    Slot* s = spare;
    spare = s->next;
    s->next = nullptr;
    return s;
  }
  if (carve == carve_end) {
    void* m = pal::map_lazy(kChunkSlots * sizeof(Slot));
    if (m == nullptr) return nullptr;
    carve = static_cast<Slot*>(m);
    carve_end = carve + kChunkSlots;
    __atomic_store_n(&nmapped, nmapped + kChunkSlots, __ATOMIC_RELAXED);
  }
  return carve++;
}

// Counters of a thread whose slot could not be mapped (out of memory):
// shared, so counts may be lost, but the process never fails for stats.
Slot overflow_slot{};

// The thread's small-block cache back to mimalloc, once; from then on its
// frees go straight there and its mallocs take nothing from the cache.
void close_cache() {
  t_local.cache_armed = 0;
  small::ThreadCache* tc = t_local.cache;
  if (tc == kParkedCache) return;
  // Parked first, before the bins are emptied: from here on the thread's
  // calls count into the parked slot and again, for real, out of line on
  // t_local.stats (its slot), and never touch tc's bins. Not left pointing
  // at tc, closed: a signal handler's malloc during the flush would pop a
  // block the flush then frees, and the slot is handed to a new thread once
  // this one is gone (or taken for gone: 2 s without tgkill), whose bins
  // this thread's later key destructors would then pop and push unlocked.
  t_local.cache = kParkedCache;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&tc->take_below, __ATOMIC_RELAXED) != 0) {
    __atomic_store_n(&tc->take_below, 0, __ATOMIC_RELAXED);
    if (flush_cache != nullptr) flush_cache(tc);
  }
}

// The key destructor, on the exiting thread itself. The thread may still
// allocate after this (t_local.stats keeps pointing at its slot), which is
// why the slot waits in `exiting` rather than being folded here.
void on_thread_exit(void* v) {
  auto* s = static_cast<Slot*>(v);
  if (thread_exited != nullptr) thread_exited(__atomic_load_n(&s->c[small_out], __ATOMIC_RELAXED));
  // Its cached small blocks go back to mimalloc, and whatever the thread
  // still frees goes straight there (design.md "The thread cache": why a
  // thread caches only once warm).
  close_cache();
  // The name it exits with, for its row: a syscall, not a /proc file.
  char name[16];
  std::memcpy(name, s->name, sizeof name);
  pal::thread_name_self(name);
  pthread_mutex_lock(&mu);
  std::memcpy(s->name, name, sizeof name);
  s->alive = 0;
  s->exited_ns = pal::now_ns();
  unlink_live(s);
  push_exiting(s);
  publish_rows();
  pthread_mutex_unlock(&mu);
}

}  // namespace

namespace {
std::atomic<std::uint64_t> thread_start_ns{0};
}  // namespace

std::uint64_t last_thread_start_ns() { return thread_start_ns.load(std::memory_order_relaxed); }

Slot* attach() {
  // Callers save errno only after slot() (free keeps it unchanged): what
  // runs here must not change it either.
  int* err = &errno;
  thread_start_ns.store(pal::now_ns(), std::memory_order_relaxed);
  t_local.errno_ptr = err;
  const int saved = *err;
  // The name it has now (usually inherited from its creator): a row keeps
  // it if no later name can be read (a forked child's copy of its parent's
  // other threads). Live rows read the current name at report time.
  char name[16] = {};
  pal::thread_name_self(name);
  const std::uint32_t tid = current_tid();
  // A vfork child (its parent's memory and TLS: the slot is its parent's
  // from the exec on) or a child made without fork's handlers (g.pid its
  // parent's) has another pid than g.pid (one getpid per thread start).
  const bool own_process = static_cast<int>(::getpid()) == g.pid;
  pthread_mutex_lock(&mu);
  Slot* s = take_slot(own_process);
  if (s != nullptr) {
    s->tid = tid;
    s->alive = own_process ? 1 : kAliveKeep;
    std::memcpy(s->name, name, sizeof name);
    push_live(s);
  }
  publish_rows();
  pthread_mutex_unlock(&mu);
  if (s == nullptr) {
    *err = saved;
    return &overflow_slot;
  }
  t_local.stats = s;
  // Its cache, closed (a slot taken again was closed and emptied by its
  // last thread's exit destructor), until it opens.
  __atomic_store_n(&s->cache.take_below, 0, __ATOMIC_RELAXED);
  t_local.cache = &s->cache;
  // The cache opens once the thread is warm (libc.hpp's free), and only
  // with a slot of its own and a key destructor to empty it at exit.
  t_local.cache_armed = have_key ? 1 : 0;
  // After t_local is set: pthread_setspecific may allocate (keys >= 32),
  // and that allocation must find this slot rather than attach again.
  if (have_key) pthread_setspecific(exit_key, s);
  *err = saved;
  return s;
}

void (*large_live_hook)() = nullptr;

void large_live_add(std::size_t bytes) {
  std::uint64_t now = large_live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  // Here a reader sees the live bytes above their peak (large_live_peak).
  if (__builtin_expect(large_live_hook != nullptr, 0)) large_live_hook();
  // A report's own helpers (t_local.in_report) raise no peak: the program
  // never held their blocks, nearly all freed before the report is done
  // (any kept for good are live, and a reading's peak is never below live).
  if (t_local.in_report != 0) return;
  std::uint64_t peak = large_peak.load(std::memory_order_relaxed);
  while (now > peak && !large_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void large_live_sub(std::size_t bytes) { large_live.fetch_sub(bytes, std::memory_order_relaxed); }

void begin_own(OwnScratch* o) {
  // Attached first (slot() sets the thread's errno pointer too, which the
  // counting paths use once a slot is there).
  o->real = slot();
  o->scratch = Slot{};
  o->cache = t_local.cache;
  o->armed = t_local.cache_armed;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // The fast paths count through the thread's cache (slot_of): parked, they
  // count into the parked slot, which no reader sees, and miss to the
  // uncached paths, which count from t_local.stats, the scratch slot. Not
  // armed: no cache opens in the scratch slot (its blocks would be lost
  // with it); the thread's own cache keeps its blocks meanwhile.
  t_local.cache_armed = 0;
  t_local.cache = kParkedCache;
  t_local.stats = &o->scratch;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

// Only additions, so that no reader ever sees a counter go down (a
// Prometheus counter that falls is a reset to rate()): of each pair, the
// side that outweighs the other, by the difference. What the helpers keep
// for good (the first report's ~64 KiB; before reliability.md no. 110,
// debuginfod's client and libcurl too) stays counted as handed out, so
// that the totals' live bytes and blocks stay what the process holds (and
// large_live's); what they freed of blocks handed out before (none known)
// as freed. The bytes given back to the OS are added whole: they were.
// Calls, histogram, bytes asked for and the rest are dropped with the
// scratch slot.
void end_own(OwnScratch* o) {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_local.stats = o->real;
  t_local.cache = o->cache;
  t_local.cache_armed = o->armed;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  Slot* s = o->real;
  if (s == nullptr) return;
  const Slot& w = o->scratch;
  const auto fold = [&](Counter out, Counter freed) {
    if (w.c[out] > w.c[freed]) bump(&s->c[out], w.c[out] - w.c[freed]);
    else if (w.c[freed] > w.c[out]) bump(&s->c[freed], w.c[freed] - w.c[out]);
  };
  fold(small_out, small_freed);
  fold(large_out, large_freed);
  fold(large_maps, large_unmaps);
  for (Counter k : kReturnedParts)
    if (w.c[k] != 0) bump(&s->c[k], w.c[k]);
}

std::size_t registry_size() {
  return __atomic_load_n(&nrows, __ATOMIC_RELAXED) + 1;
}

namespace {

void add_counts(ThreadRow* r, const std::uint64_t* c, const std::uint64_t* h) {
  for (unsigned i = 0; i < kCounters; ++i) r->c[i] += c[i];
  // Derived from the same reading as its parts (stats.hpp, kReturnedParts);
  // a slot's own large_returned_bytes is never counted and stays 0.
  for (Counter k : kReturnedParts) r->c[large_returned_bytes] += c[k];
  for (unsigned i = 0; i < kHistBuckets; ++i) r->hist[i] += h[i];
}

}  // namespace

void (*read_slot_hook)(const Slot* s, int pass, int phase) = nullptr;

namespace {

// How far the calls `c` counts that the histogram buckets are from its
// count `counted`: what a report would show as the two disagreeing (an
// uncount moves a call and its bucket back, so either way round).
std::uint64_t calls_off(const std::uint64_t* c, std::uint64_t counted) {
  std::uint64_t calls = 0;
  for (unsigned i : {malloc_calls, calloc_calls, realloc_calls, aligned_calls}) calls += c[i];
  return calls > counted ? calls - counted : counted - calls;
}

}  // namespace

// A slot's counters while its owner may be writing them. The owner counts
// a call before its histogram bucket and has no lock or sequence number (the
// hot path pays for none), so the reader checks instead: counters, then the
// histogram, then the counters again. If they did not move, no call started
// while the histogram was read, and the two differ by at most the one call
// in flight. A pass whose counters moved has two readings of them, one from
// before the histogram was read and one from after; every bucket only grows
// between them (but for an uncount), so the reading whose calls are closest
// to the histogram's count has every bucket within that distance of its value
// at that reading. A pass has no bound in time: an interrupt, a vCPU the host
// runs elsewhere or a preemption between its reads leaves the owner counting
// meanwhile (a microsecond is 150-250 calls on the thread cache's path, a
// preemption millions). So the reader keeps the closest reading of all its
// passes and stops as soon as one is within the call in flight, else after
// kMaxTries passes. Until 2026-12-05 it kept the last pass (a report's
// histogram ran 115-247 calls ahead of its call counts under load), and until
// 2026-12-06 the pass whose counters moved least, accepted within 64 calls
// (the UBSan build under load: off by 7 on 31,000 calls; docs/reliability.md
// no. 26). Bounded, lock-free and allocation-free (the exit-time report reads
// from _exit and signal handlers).
void read_slot(const Slot* s, std::uint64_t* c, std::uint64_t* h) {
  constexpr int kMaxTries = 256;
  std::uint64_t c1[kCounters], c2[kCounters], ph[kHistBuckets];
  std::uint64_t best = ~std::uint64_t{0};
  for (int pass = 0; pass < kMaxTries; ++pass) {
    for (unsigned i = 0; i < kCounters; ++i) c1[i] = __atomic_load_n(&s->c[i], __ATOMIC_RELAXED);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (read_slot_hook != nullptr) read_slot_hook(s, pass, 0);
    for (unsigned i = 0; i < kHistBuckets; ++i) ph[i] = __atomic_load_n(&s->hist[i], __ATOMIC_RELAXED);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (read_slot_hook != nullptr) read_slot_hook(s, pass, 1);
    for (unsigned i = 0; i < kCounters; ++i) c2[i] = __atomic_load_n(&s->c[i], __ATOMIC_RELAXED);
    const bool still = std::memcmp(c1, c2, sizeof c1) == 0;
    std::uint64_t counted = 0;
    if (!still)
      for (unsigned i = 0; i < kHistBuckets; ++i) counted += ph[i];
    const std::uint64_t d1 = still ? 0 : calls_off(c1, counted), d2 = still ? 0 : calls_off(c2, counted);
    const bool second = d2 < d1;
    const std::uint64_t d = second ? d2 : d1;
    if (d < best) {
      best = d;
      std::memcpy(c, second ? c2 : c1, sizeof c1);
      std::memcpy(h, ph, sizeof ph);
    }
    if (best <= 1) return;
  }
}

namespace {

// One registry slot into a row (while they fit, one kept back) and the
// totals, else into `folded`.
void read_row(Snapshot* snap, ThreadRow* folded, const Slot* s) {
  std::uint64_t c[kCounters];
  std::uint64_t h[kHistBuckets];
  ++snap->threads_seen;
  read_slot(s, c, h);
  add_counts(&snap->total, c, h);
  // A thread's cache is emptied by its exit destructor: what an exited
  // thread's slot still showed here would be blocks lost to mimalloc.
  if (cache_bytes != nullptr) snap->small_cached += cache_bytes(&s->cache);
  if (snap->nrows + 1 < snap->cap) {
    ThreadRow* r = &snap->rows[snap->nrows++];
    std::memset(r, 0, sizeof *r);
    r->tid = s->tid;
    r->alive = s->alive != 0;
    std::memcpy(r->name, s->name, sizeof r->name);
    add_counts(r, c, h);
  } else {
    folded->folded += 1;
    add_counts(folded, c, h);
  }
}

// Every registry slot: live, exiting, kept. Under mu, or without it at exit:
// then a list may change under the walk, so each walk is bounded by the
// slots that exist (it may miss or double a slot, never loop).
void read_registry(Snapshot* snap, ThreadRow* folded) {
  const std::size_t bound = __atomic_load_n(&nmapped, __ATOMIC_RELAXED);
  std::size_t steps = 0;
  for (Slot* s = live; s != nullptr && steps < bound; s = s->next, ++steps) read_row(snap, folded, s);
  steps = 0;
  for (Slot* s = exiting; s != nullptr && steps < bound; s = s->next, ++steps) read_row(snap, folded, s);
  const std::size_t n = nkept < kKeepExited ? nkept : kKeepExited;
  for (std::size_t i = 0; i < n; ++i)
    if (kept[i] != nullptr) read_row(snap, folded, kept[i]);
}

// Retired threads' counters and the out-of-memory slot's, into `folded`
// and the totals.
void read_retired(Snapshot* snap, ThreadRow* folded) {
  folded->folded += static_cast<std::uint32_t>(retired_threads);
  add_counts(folded, retired.c, retired.hist);
  add_counts(&snap->total, retired.c, retired.hist);
  bool overflow_used = false;
  for (unsigned i = 0; i < kCounters; ++i) overflow_used |= __atomic_load_n(&overflow_slot.c[i], __ATOMIC_RELAXED) != 0;
  if (!overflow_used) return;
  std::uint64_t c[kCounters];
  std::uint64_t h[kHistBuckets];
  read_slot(&overflow_slot, c, h);
  add_counts(folded, c, h);
  add_counts(&snap->total, c, h);
  if (folded->folded == 0) folded->folded = 1;
}

}  // namespace

void snapshot(Snapshot* snap, bool try_only) {
  bool locked;
  if (try_only) locked = pthread_mutex_trylock(&mu) == 0;
  else locked = pthread_mutex_lock(&mu) == 0;
  snap->partial = !locked;
  snap->nrows = 0;
  snap->threads_seen = 0;
  snap->small_cached = 0;
  std::memset(&snap->total, 0, sizeof snap->total);
  // One row is kept back for the folded threads: retired ones, the
  // out-of-memory slot, and any thread that registered after the caller
  // sized the buffer. Totals never lose a count.
  ThreadRow folded;
  std::memset(&folded, 0, sizeof folded);
  read_registry(snap, &folded);
  read_retired(snap, &folded);
  if (shelf_bytes != nullptr) snap->small_cached += shelf_bytes();
  if (folded.folded != 0 && snap->nrows < snap->cap) snap->rows[snap->nrows++] = folded;
  large_live_peak(&snap->large_live, &snap->large_peak);
  if (locked) pthread_mutex_unlock(&mu);
  // A living thread's name is the one it has now: read after the lock is
  // released, since it costs a file read per thread (a periodic report must
  // not hold up thread starts and exits that long).
  for (std::size_t i = 0; i < snap->nrows; ++i)
    if (snap->rows[i].alive && snap->rows[i].folded == 0) read_name(snap->rows[i].tid, snap->rows[i].name);
}

void init(void (*flush)(small::ThreadCache*), std::size_t (*bytes)(const small::ThreadCache*),
          std::size_t (*shelved)(), void (*exited)(std::uint64_t)) {
  flush_cache = flush;
  thread_exited = exited;
  cache_bytes = bytes;
  shelf_bytes = shelved;
  have_key = pthread_key_create(&exit_key, &on_thread_exit) == 0;
}

void fork_prepare() { pthread_mutex_lock(&mu); }
void fork_parent() { pthread_mutex_unlock(&mu); }
void fork_child() {
  pthread_mutex_init(&mu, nullptr);
  // Only the forking thread exists in the child: every other slot, living
  // or exiting in the parent, belongs to a thread that will never write it
  // here, so it settles at once (no syscall needed to know it is gone).
  Slot* mine = t_local.stats;
  for (Slot* s = live; s != nullptr;) {
    Slot* next = s->next;
    if (s == mine) {
      s->tid = current_tid();
    } else {
      unlink_live(s);
      s->alive = 0;
      // Its cached blocks are the child's copies of another thread's: no
      // thread here will use or give them back (like that thread's own
      // mimalloc pages, they stay with the child).
      std::memset(&s->cache, 0, sizeof s->cache);
      keep_or_retire(s);
    }
    s = next;
  }
  live_look = nullptr;
  // The forking thread may itself be past its exit destructor (a fork from
  // a later destructor): its slot stays in `exiting`.
  for (std::size_t n = nexiting; n > 0; --n) {
    Slot* s = pop_exiting();
    if (s == mine) {
      s->tid = current_tid();
      push_exiting(s);
    } else {
      keep_or_retire(s);
    }
  }
  publish_rows();
}

}  // namespace lowtide::stats

namespace lowtide::stats {
// For the invariant checks (invariants.hpp).
std::uint64_t large_live_now() { return large_live.load(std::memory_order_relaxed); }
std::uint64_t large_peak_now() { return large_peak.load(std::memory_order_relaxed); }
// large_live_add raises the peak after the live count: a reader between
// the two saw live above its peak (a thread making new peaks, read by
// lowtide_get_stats: 350-12,789 of ~8 M reads). The peak is the highest
// live value seen, and the one read here was seen: never below it.
void large_live_peak(std::uint64_t* live, std::uint64_t* peak) {
  *live = large_live.load(std::memory_order_relaxed);
  const std::uint64_t p = large_peak.load(std::memory_order_relaxed);
  *peak = p > *live ? p : *live;
}
}  // namespace lowtide::stats
