#include "large_cache.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <csignal>
#include <ctime>
#include <pthread.h>

#include "arena.hpp"
#include "large_space.hpp"
#include "log.hpp"
#include "mem_limit.hpp"
#include "platform.hpp"
#include "state.hpp"
#include "stats.hpp"

namespace lowtide::cache {

constexpr std::size_t G = Arena::kGranule;

// ---- the cache ----

void ReuseCache::recompute_oldest() {  // under mu_
  std::uint64_t o = UINT64_MAX;
  for (int i = 0; i < count_; ++i) o = entries_[i].freed_ns < o ? entries_[i].freed_ns : o;
  oldest_ns_.store(o, std::memory_order_relaxed);
  held_view_.store(bytes_held_, std::memory_order_relaxed);
}

void ReuseCache::remove_at(int i) {  // under mu_
  bytes_held_ -= Extent::bytes_of(entries_[i].n);
  entries_[i] = entries_[--count_];
}

// Give extents back to the OS: outside the lock, since dropping many pages
// takes a while.
std::size_t ReuseCache::give_back(const Entry* out, int n) {
  std::size_t total = 0;
  for (int i = 0; i < n; ++i) {
    const Extent e{out[i].start, out[i].n};
    deps_.decommit(e.base(arena_), e.bytes());
    arena_.release(e.start, e.n);
    total += e.bytes();
  }
  if (total != 0 && deps_.returned != nullptr) deps_.returned(total);
  return total;
}

// Hand out the first `want` granules of entry i (all of it if it has no
// more): the rest stays cached where it is, with its age. Under mu_.
std::uint32_t ReuseCache::cut(int i, std::uint32_t want) {
  Entry& e = entries_[i];
  std::uint32_t s = e.start;
  if (e.n <= want) {
    remove_at(i);
  } else {
    arena_.split(e.start, e.n, want);
    e.start += want;
    e.n -= want;
    bytes_held_ -= Extent::bytes_of(want);
  }
  recompute_oldest();
  return s;
}

int ReuseCache::oldest() const {  // under mu_, count_ > 0
  int o = 0;
  for (int i = 1; i < count_; ++i)
    if (entries_[i].freed_ns < entries_[o].freed_ns) o = i;
  return o;
}

// Take at least `bytes` out of the cache into out[], oldest first; of the
// last entry touched only the granules needed (its front), since joined
// entries can be large. Returns how many entries out[] got. Under mu_.
int ReuseCache::trim_oldest(std::size_t bytes, Entry* out) {
  int n = 0;
  while (bytes != 0 && count_ > 0) {
    int o = oldest();
    Entry& e = entries_[o];
    std::size_t len = Extent::bytes_of(e.n);
    if (len <= bytes) {
      out[n++] = e;
      bytes -= len;
      remove_at(o);
    } else {
      auto k = Extent::granules_of(bytes + G - 1);
      arena_.split(e.start, e.n, k);
      out[n++] = Entry{e.start, k, e.freed_ns};
      e.start += k;
      e.n -= k;
      bytes_held_ -= Extent::bytes_of(k);
      bytes = 0;
    }
  }
  recompute_oldest();
  return n;
}

// Join the cached neighbours of [*start, *start + *n) to it, so blocks cut
// by take() grow back whole. Under mu_.
void ReuseCache::join_neighbours(std::uint32_t* start, std::uint32_t* n) {
  for (int i = 0; i < count_;) {
    Entry& e = entries_[i];
    if (e.start + e.n == *start || *start + *n == e.start) {
      std::uint32_t s = e.start < *start ? e.start : *start;
      arena_.join(s, e.start < *start ? e.n : *n, e.n + *n);
      *start = s;
      *n += e.n;
      remove_at(i);
      i = 0;
    } else {
      ++i;
    }
  }
}

std::size_t ReuseCache::allowed(std::size_t held) const {
  const std::size_t room = deps_.room != nullptr ? deps_.room(held) : SIZE_MAX;
  return room < cap_ ? room : cap_;
}

bool ReuseCache::put(std::uint32_t start, std::uint32_t n) {
  // Refused: no thread to return it later (see start_thread), or no room
  // under the memory limit even for this block alone; return it now.
  const std::size_t len = Extent::bytes_of(n);
  if (len > allowed(cached_bytes() + len) || refusing_.load(std::memory_order_relaxed)) return false;
  Entry evicted[kSlots + 1];
  int nev = 0;
  std::uint64_t now = deps_.now_ns();
  lock();
  join_neighbours(&start, &n);
  // Make room: a slot, then bytes, oldest first (possibly the front of the
  // block just joined, if it alone is past the cap).
  if (count_ == kSlots) {
    int o = oldest();
    evicted[nev++] = entries_[o];
    remove_at(o);
  }
  entries_[count_++] = Entry{start, n, now};
  bytes_held_ += Extent::bytes_of(n);
  if (std::size_t most = allowed(bytes_held_); bytes_held_ > most) nev += trim_oldest(bytes_held_ - most, evicted + nev);
  recompute_oldest();
  unlock();
  give_back(evicted, nev);
  return true;
}

// The smallest entry of at least `need` granules aligned as asked, the most
// recently freed of equals (its pages are the likeliest still in cache);
// -1 if none. Under mu_.
int ReuseCache::best_fit(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g) const {
  int best = -1;
  for (int i = 0; i < count_; ++i) {
    const Entry& e = entries_[i];
    if (e.n < need) continue;
    std::uintptr_t addr = reinterpret_cast<std::uintptr_t>(arena_.addr(e.start + skew_g));
    if (align_g > 1 && addr % (std::uintptr_t{align_g} * G) != 0) continue;
    if (best < 0 || e.n < entries_[best].n || (e.n == entries_[best].n && e.freed_ns > entries_[best].freed_ns))
      best = i;
  }
  return best;
}

std::uint32_t ReuseCache::take(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, bool for_growth,
                               std::uint32_t* got) {
  if (cached_bytes() == 0) return Arena::kNone;
  lock();
  int best = best_fit(need, align_g, skew_g);
  std::uint32_t s = Arena::kNone;
  if (best >= 0) {
    last_take_ns_.store(deps_.now_ns(), std::memory_order_relaxed);
    std::uint32_t want = for_growth ? (need <= UINT32_MAX / 4 ? need * 4 : need) : need;
    *got = want < entries_[best].n ? want : entries_[best].n;
    s = cut(best, want);
  }
  unlock();
  return s;
}

bool ReuseCache::take_at(std::uint32_t at, std::uint32_t n) {
  if (cached_bytes() == 0) return false;
  bool ok = false;
  lock();
  for (int i = 0; i < count_; ++i) {
    if (entries_[i].start == at) {
      if (entries_[i].n >= n) {
        cut(i, n);
        last_take_ns_.store(deps_.now_ns(), std::memory_order_relaxed);
        ok = true;
      }
      break;
    }
  }
  unlock();
  return ok;
}

std::size_t ReuseCache::purge(bool all) {
  const std::size_t held = cached_bytes();
  if (held == 0) return 0;
  std::uint64_t now = deps_.now_ns();
  std::uint64_t max_age = decay_ns_;
  if (age_ns(now, last_take_ns_.load(std::memory_order_relaxed)) < decay_ns_) max_age = decay_ns_ * kBusyAgeFactor;
  if (!all && age_ns(now, oldest_ns_.load(std::memory_order_relaxed)) < max_age && held <= allowed(held)) return 0;
  Entry out[kSlots];
  int n = 0;
  lock();
  for (int i = 0; i < count_;) {
    if (all || age_ns(now, entries_[i].freed_ns) >= max_age) {
      out[n++] = entries_[i];
      remove_at(i);
    } else {
      ++i;
    }
  }
  // The process grew towards its memory limit: what is left, oldest first,
  // down to what the limit leaves room for. (At most kSlots entries in all:
  // trim_oldest takes only entries still cached.)
  if (std::size_t most = allowed(bytes_held_); bytes_held_ > most) n += trim_oldest(bytes_held_ - most, out + n);
  recompute_oldest();
  unlock();
  return give_back(out, n);
}

void ReuseCache::evict_for(std::size_t want) {
  if (cached_bytes() + want <= kMissSlack) return;
  Entry out[kSlots];
  lock();
  int n = bytes_held_ + want > kMissSlack ? trim_oldest(bytes_held_ + want - kMissSlack, out) : 0;
  unlock();
  give_back(out, n);
}

int ReuseCache::entries() const {
  auto& self = const_cast<ReuseCache&>(*this);
  self.lock();
  int n = count_;
  self.unlock();
  return n;
}

int ReuseCache::view(View* out) const {
  auto& self = const_cast<ReuseCache&>(*this);
  // The age rule is purge()'s: busy caches keep entries kBusyAgeFactor
  // periods.
  std::uint64_t now = deps_.now_ns();
  std::uint64_t max_age = decay_ns_;
  if (age_ns(now, last_take_ns_.load(std::memory_order_relaxed)) < decay_ns_) max_age = decay_ns_ * kBusyAgeFactor;
  self.lock();
  int n = count_;
  for (int i = 0; i < n; ++i)
    out[i] = View{entries_[i].start, entries_[i].n, age_ns(now, entries_[i].freed_ns) >= max_age};
  self.unlock();
  return n;
}

const char* ReuseCache::check() {
  const char* why = nullptr;
  lock();
  arena_.lock();  // the order put() takes them in (join)
  std::size_t total = 0;
  if (count_ < 0 || count_ > kSlots) why = "cache: more entries than slots";
  for (int i = 0; why == nullptr && i < count_; ++i) {
    const Entry& e = entries_[i];
    total += Extent::bytes_of(e.n);
    if (!arena_.is_used_extent(e.start, e.n)) why = "cache: an entry is not one used extent of the arena";
    for (int j = i + 1; why == nullptr && j < count_; ++j) {
      const Entry& f = entries_[j];
      if (e.start <= f.start + f.n && f.start <= e.start + e.n)
        why = "cache: two entries overlap or touch (not joined)";
    }
  }
  if (why == nullptr && total != bytes_held_) why = "cache: the entries' bytes differ from bytes held";
  if (why == nullptr && bytes_held_ > cap_) why = "cache: holds more than its cap";
  if (why == nullptr && held_view_.load(std::memory_order_relaxed) != bytes_held_)
    why = "cache: the lock-free view of bytes held is stale";
  arena_.unlock();
  unlock();
  return why;
}

// ---- the process's cache: large::space.arena, the real clock and pages ----

namespace {

void returned_to_os(std::size_t bytes) { account_returned(bytes); }

constexpr Deps kProductionDeps{&pal::now_ns, &pal::decommit, &returned_to_os, &limit::cache_room};
}  // namespace

constinit ReuseCache production_cache{large::space.arena, kProductionDeps};

namespace {

bool use_thread = false;
std::atomic<bool> thread_started{false};
void (*on_thread_start)() = nullptr;
pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;

void* decay_main(void*) {
  pthread_setname_np(pthread_self(), "lowtide-decay");
  for (;;) {
    // A quarter of the decay period, at least 1 ms; at most 1 s, so the
    // memory limit's RSS sample and cgroup re-read (limit::tick) keep their
    // pace under a long LOWTIDE_DECAY_MS.
    std::uint64_t period = production_cache.decay_ns() / 4;
    period = period < 1'000'000 ? 1'000'000 : period > 1'000'000'000 ? 1'000'000'000 : period;
    timespec ts{static_cast<time_t>(period / 1'000'000'000u), static_cast<long>(period % 1'000'000'000u)};
    nanosleep(&ts, nullptr);
    limit::tick();  // the RSS sample purge's limit check reads
    if (production_cache.cached_bytes() != 0) production_cache.purge(false);
  }
  return nullptr;
}

// The helper thread that returns cached blocks once the process goes quiet.
// Started at the first large allocation (a process that never makes one has
// no extra thread), with every signal blocked so it never takes the host's
// signals. Not from free(): glibc frees dlopen'ed modules' TLS blocks while
// holding its stack-cache lock, which pthread_create takes too.
//
// Its stack: 64 KiB is plenty for decay_main, but glibc carves the static
// TLS block (the executable's and initial-exec libraries' __thread data) out
// of the requested stack and refuses (EINVAL) a stack it does not fit in.
// glibc has no public way to ask for the static TLS size, so on EINVAL the
// size doubles, up to 8 MiB, then glibc's default is tried. If no thread can
// be created at all (EAGAIN from a thread limit, a seccomp filter, ...), the
// cache stops keeping blocks (its puts refused, so free returns them
// as with LOWTIDE_CACHE=0) and gives back what it holds, warns once, and a
// later large allocation tries again after a backoff (1 s, doubling up to
// 64 s) rather than at every call.
std::atomic<bool> warned_no_thread{false};
std::atomic<std::uint64_t> retry_after_ns{0};
std::atomic<unsigned> failed_starts{0};
constexpr std::size_t kStackFirst = std::size_t{64} << 10;
constexpr std::size_t kStackMax = std::size_t{8} << 20;
constexpr unsigned kMaxBackoffShift = 6;  // 1 s << 6 = 64 s

int create_thread(std::size_t stack) {  // stack 0: glibc's default size
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (stack != 0) pthread_attr_setstacksize(&attr, stack);
  pthread_t t;
  int rc = pthread_create(&t, &attr, &decay_main, nullptr);
  pthread_attr_destroy(&attr);
  return rc;
}

void start_thread() {
  if (!use_thread) return;
  std::uint64_t retry = retry_after_ns.load(std::memory_order_relaxed);
  if (retry != 0 && pal::now_ns() < retry) return;
  // Held while the threads are being created, and by fork's prepare
  // handler: a fork waits until both exist, so a child never inherits a
  // half-done start (it would create them afresh, its counters moving by
  // the TLS glibc allocates for new threads: fork_busy saw it).
  pthread_mutex_lock(&start_mu);
  if (thread_started.exchange(true)) {
    pthread_mutex_unlock(&start_mu);
    return;
  }
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = EINVAL;
  for (std::size_t stack = kStackFirst; rc == EINVAL && stack <= kStackMax; stack *= 2) rc = create_thread(stack);
  if (rc == EINVAL) rc = create_thread(0);
  // The live-query server (src/live.cpp) is started here, with the decay
  // thread and under the same rules: at a large allocation, outside every
  // lock, every signal blocked (the new thread inherits the mask), only in
  // a process that now has a lowtide thread anyway. Here rather than from
  // the decay thread: the thread's TLS that glibc allocates for it counts on
  // the allocating thread, which already has a counter slot (the decay
  // thread never allocates and has none).
  if (rc == 0 && on_thread_start != nullptr) on_thread_start();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_mutex_unlock(&start_mu);
  if (rc == 0) {
    production_cache.refuse_puts(false);
    return;
  }
  unsigned fails = failed_starts.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t backoff = std::uint64_t{1'000'000'000} << (fails < kMaxBackoffShift ? fails : kMaxBackoffShift);
  retry_after_ns.store(pal::now_ns() + backoff, std::memory_order_relaxed);
  production_cache.refuse_puts(true);
  thread_started.store(false);
  production_cache.purge(true);
  if (!warned_no_thread.exchange(true, std::memory_order_relaxed)) {
    const char* name = strerrorname_np(rc);  // no allocation, unlike strerror
    log::warn("could not start the lowtide-decay thread (pthread_create: {}); freed large blocks are "
              "returned to the OS at free until it starts (retried at large allocations, at most every 64 s)",
              name != nullptr ? name : "error");
  }
}

}  // namespace

void account_returned(std::size_t bytes) {
  large::space.mapped.fetch_sub(bytes, std::memory_order_relaxed);
  stats::add(stats::slot(), stats::large_returned_bytes, bytes);
}

void init(void (*thread_start_hook)()) {
  on_thread_start = thread_start_hook;
  production_cache.configure(g.config.get(Opt::cache), g.config.get(Opt::decay_ms) * 1'000'000u);
  use_thread = g.config.get(Opt::decay_thread) == 0;  // "on" is the first word
}

bool put(std::uint32_t start, std::uint32_t n) { return production_cache.put(start, n); }
std::uint32_t take(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, bool for_growth,
                   std::uint32_t* got) {
  return production_cache.take(need, align_g, skew_g, for_growth, got);
}
bool take_at(std::uint32_t at, std::uint32_t n) { return production_cache.take_at(at, n); }
std::size_t purge(bool all) { return production_cache.purge(all); }
void evict_for(std::size_t bytes) { production_cache.evict_for(bytes); }
std::size_t cached_bytes() { return production_cache.cached_bytes(); }
int view(ReuseCache::View* out) { return production_cache.view(out); }

void note_large_allocation() {
  // Outside every lock: keeps the memory limit's RSS estimate fresh when the
  // decay thread is off (frees need none: they only make it smaller).
  limit::maybe_sample();
  if (production_cache.cap() != 0 && !thread_started.load(std::memory_order_relaxed)) start_thread();
}

// The start lock first: a start in progress may take the cache's lock
// (purge, when no thread could be created).
void fork_prepare() {
  pthread_mutex_lock(&start_mu);
  production_cache.lock();
}
void fork_parent() {
  production_cache.unlock();
  pthread_mutex_unlock(&start_mu);
}
void fork_child() {
  production_cache.reset_after_fork();
  pthread_mutex_init(&start_mu, nullptr);
  // The decay thread does not exist in the child; the next put starts one.
  thread_started.store(false);
}

}  // namespace lowtide::cache
