#include "stats.hpp"

#include <atomic>
#include <cstring>
#include <ctime>
#include <pthread.h>

#include "log.hpp"
#include "platform.hpp"

namespace lowtide::stats {

namespace {

// Slots kept in the registry before exited threads' slots are recycled
// (their counters folded into `retired`).
constexpr std::size_t kKeepRows = 256;
// An exited thread may still allocate during its own teardown (TLS
// destructors, glibc freeing its stack cache) after our key destructor ran:
// its slot is recycled only once it has been gone this long.
constexpr std::uint64_t kRecycleAfterNs = 2'000'000'000;
constexpr std::size_t kChunkSlots = 64;

pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
Slot* head = nullptr;      // every slot in use, newest first
std::size_t nslots = 0;
Slot* spare = nullptr;     // carved but unused slots
Slot retired{};            // counters of recycled slots
std::uint64_t retired_threads = 0;
pthread_key_t exit_key;
bool have_key = false;

std::atomic<std::uint64_t> large_live{0};
std::atomic<std::uint64_t> large_peak{0};

std::uint64_t weight(const Slot* s) { return s->c[small_out] + s->c[large_out]; }

void read_name(std::uint32_t tid, char* out) {
  char path[64];
  auto r = fmt::format_to_n(path, sizeof path - 1, "/proc/self/task/{}/comm", tid);
  path[r.size] = '\0';
  char buf[32];
  long n = pal::read_file(path, buf, sizeof buf);
  if (n <= 0) return;
  if (buf[n - 1] == '\n') buf[n - 1] = '\0';
  std::strncpy(out, buf, 15);
  out[15] = '\0';
}

void fold_into(Slot* dst, const Slot* src) {
  for (unsigned i = 0; i < kCounters; ++i) dst->c[i] += src->c[i];
  for (unsigned i = 0; i < kHistBuckets; ++i) dst->hist[i] += src->hist[i];
}

// Under mu: a slot for a new thread.
Slot* take_slot() {
  if (nslots >= kKeepRows) {
    // Recycle the lightest long-exited slot.
    std::uint64_t now = pal::now_ns();
    Slot* best = nullptr;
    Slot* best_prev = nullptr;
    Slot* prev = nullptr;
    for (Slot* s = head; s != nullptr; prev = s, s = s->next) {
      if (s->alive || now - s->exited_ns < kRecycleAfterNs) continue;
      if (best == nullptr || weight(s) < weight(best)) {
        best = s;
        best_prev = prev;
      }
    }
    if (best != nullptr) {
      fold_into(&retired, best);
      ++retired_threads;
      if (best_prev != nullptr) best_prev->next = best->next;
      else head = best->next;
      --nslots;
      std::memset(static_cast<void*>(best), 0, sizeof *best);
      return best;
    }
  }
  if (spare == nullptr) {
    void* m = pal::map_lazy(kChunkSlots * sizeof(Slot));
    if (m == nullptr) return nullptr;
    auto* chunk = static_cast<Slot*>(m);
    for (std::size_t i = 0; i < kChunkSlots; ++i) {
      chunk[i].next = spare;
      spare = &chunk[i];
    }
  }
  Slot* s = spare;
  spare = s->next;
  s->next = nullptr;
  return s;
}

// Counters of a thread whose slot could not be mapped (out of memory):
// shared, so counts may be lost, but the process never fails for stats.
Slot overflow_slot{};

void on_thread_exit(void* v) {
  auto* s = static_cast<Slot*>(v);
  read_name(s->tid, s->name);
  pthread_mutex_lock(&mu);
  s->alive = 0;
  s->exited_ns = pal::now_ns();
  pthread_mutex_unlock(&mu);
}

}  // namespace

Slot* attach() {
  pthread_mutex_lock(&mu);
  Slot* s = take_slot();
  if (s != nullptr) {
    s->tid = current_tid();
    s->alive = 1;
    read_name(s->tid, s->name);
    s->next = head;
    head = s;
    ++nslots;
  }
  pthread_mutex_unlock(&mu);
  if (s == nullptr) return &overflow_slot;
  t_local.stats = s;
  // After t_local is set: pthread_setspecific may allocate (keys >= 32),
  // and that allocation must find this slot rather than attach again.
  if (have_key) pthread_setspecific(exit_key, s);
  return s;
}

void large_live_add(std::size_t bytes) {
  std::uint64_t now = large_live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::uint64_t peak = large_peak.load(std::memory_order_relaxed);
  while (now > peak && !large_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void large_live_sub(std::size_t bytes) { large_live.fetch_sub(bytes, std::memory_order_relaxed); }

std::size_t registry_size() {
  return __atomic_load_n(&nslots, __ATOMIC_RELAXED) + 1;
}

namespace {

void add_counts(ThreadRow* r, const std::uint64_t* c, const std::uint64_t* h) {
  for (unsigned i = 0; i < kCounters; ++i) r->c[i] += c[i];
  for (unsigned i = 0; i < kHistBuckets; ++i) r->hist[i] += h[i];
}

// A slot's counters, each read once (the owner may be writing them).
void read_slot(const Slot* s, std::uint64_t* c, std::uint64_t* h) {
  for (unsigned i = 0; i < kCounters; ++i) c[i] = __atomic_load_n(&s->c[i], __ATOMIC_RELAXED);
  for (unsigned i = 0; i < kHistBuckets; ++i) h[i] = __atomic_load_n(&s->hist[i], __ATOMIC_RELAXED);
}

// The registry's slots into rows (while they fit, one kept back) and the
// totals; the rest into `folded`. Under mu, or without it at exit.
void read_registry(Snapshot* snap, ThreadRow* folded) {
  std::uint64_t c[kCounters];
  std::uint64_t h[kHistBuckets];
  for (Slot* s = head; s != nullptr; s = s->next) {
    ++snap->threads_seen;
    read_slot(s, c, h);
    add_counts(&snap->total, c, h);
    if (snap->nrows + 1 < snap->cap) {
      ThreadRow* r = &snap->rows[snap->nrows++];
      std::memset(r, 0, sizeof *r);
      r->tid = s->tid;
      r->alive = s->alive != 0;
      std::memcpy(r->name, s->name, sizeof r->name);
      if (r->alive) read_name(s->tid, r->name);  // the name it has now
      add_counts(r, c, h);
    } else {
      folded->folded += 1;
      add_counts(folded, c, h);
    }
  }
}

// Recycled threads' counters and the out-of-memory slot's, into `folded`
// and the totals.
void read_retired(Snapshot* snap, ThreadRow* folded) {
  folded->folded += static_cast<std::uint32_t>(retired_threads);
  add_counts(folded, retired.c, retired.hist);
  add_counts(&snap->total, retired.c, retired.hist);
  bool overflow_used = false;
  for (unsigned i = 0; i < kCounters; ++i) overflow_used |= overflow_slot.c[i] != 0;
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
  std::memset(&snap->total, 0, sizeof snap->total);
  // One row is kept back for the folded threads: recycled slots, the
  // out-of-memory slot, and any thread that registered after the caller
  // sized the buffer. Totals never lose a count.
  ThreadRow folded;
  std::memset(&folded, 0, sizeof folded);
  read_registry(snap, &folded);
  read_retired(snap, &folded);
  if (folded.folded != 0 && snap->nrows < snap->cap) snap->rows[snap->nrows++] = folded;
  snap->large_live = large_live.load(std::memory_order_relaxed);
  snap->large_peak = large_peak.load(std::memory_order_relaxed);
  if (locked) pthread_mutex_unlock(&mu);
}

void init() {
  have_key = pthread_key_create(&exit_key, &on_thread_exit) == 0;
}

void fork_prepare() { pthread_mutex_lock(&mu); }
void fork_parent() { pthread_mutex_unlock(&mu); }
void fork_child() {
  pthread_mutex_init(&mu, nullptr);
  // Only the forking thread exists in the child.
  Slot* mine = t_local.stats;
  std::uint64_t now = pal::now_ns();
  for (Slot* s = head; s != nullptr; s = s->next) {
    if (s == mine) {
      s->tid = current_tid();
    } else if (s->alive) {
      s->alive = 0;
      s->exited_ns = now;
    }
  }
}

}  // namespace lowtide::stats

namespace lowtide::stats {
// For the invariant checks (invariants.hpp).
std::uint64_t large_live_now() { return large_live.load(std::memory_order_relaxed); }
}  // namespace lowtide::stats
