#include "large_cache.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <csignal>
#include <ctime>
#include <pthread.h>

#include "arena.hpp"
#include "log.hpp"
#include "platform.hpp"
#include "state.hpp"
#include "stats.hpp"

namespace lowtide::cache {

namespace {

constexpr int kSlots = 128;
constexpr std::size_t G = Arena::kGranule;
// A miss may fault fresh pages while the cache still holds this much: a few
// blocks of a loop whose sizes vary stay warm instead of being given back
// at every miss (see evict_for). Bounds what reuse adds to the peak.
constexpr std::size_t kMissSlack = std::size_t{8} << 20;

struct Entry {
  std::uint32_t start, n;
  std::uint64_t freed_ns;
};

pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
Entry entries[kSlots];
int count = 0;
std::size_t bytes_held = 0;  // under mu
std::atomic<std::size_t> held_view{0};
std::size_t cap = 0;
std::uint64_t decay_ns = 0;
bool use_thread = false;
std::atomic<bool> thread_started{false};
std::atomic<std::uint64_t> oldest_ns{UINT64_MAX};
// When take() last served a block. While the cache is being drawn from, an
// entry may outlive the decay period, up to kBusyAgeFactor times it: a loop
// working through a batch of freed buffers (a second round of the same job)
// finds them still there, and what nobody takes still goes back within a
// few periods.
std::atomic<std::uint64_t> last_take_ns{0};
constexpr std::uint64_t kBusyAgeFactor = 4;

std::uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

void recompute_oldest() {  // under mu
  std::uint64_t o = UINT64_MAX;
  for (int i = 0; i < count; ++i) o = entries[i].freed_ns < o ? entries[i].freed_ns : o;
  oldest_ns.store(o, std::memory_order_relaxed);
  held_view.store(bytes_held, std::memory_order_relaxed);
}

void remove_at(int i) {  // under mu
  bytes_held -= std::size_t{entries[i].n} << Arena::kGranuleShift;
  entries[i] = entries[--count];
}

// Give extents back to the OS: outside the lock, since dropping many pages
// takes a while.
std::size_t give_back(const Entry* out, int n) {
  std::size_t total = 0;
  for (int i = 0; i < n; ++i) {
    std::size_t len = std::size_t{out[i].n} << Arena::kGranuleShift;
    char* p = g.arena.addr(out[i].start);
    pal::decommit(p, len);
    g.arena.release(out[i].start, out[i].n);
    g.large_mapped.fetch_sub(len, std::memory_order_relaxed);
    total += len;
  }
  if (total != 0) stats::add(stats::slot(), stats::large_returned_bytes, total);
  return total;
}

void* decay_main(void*) {
  pthread_setname_np(pthread_self(), "lowtide-decay");
  for (;;) {
    std::uint64_t period = decay_ns / 4 > 1'000'000 ? decay_ns / 4 : 1'000'000;
    timespec ts{static_cast<time_t>(period / 1'000'000'000u), static_cast<long>(period % 1'000'000'000u)};
    nanosleep(&ts, nullptr);
    if (held_view.load(std::memory_order_relaxed) != 0) purge(false);
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
// cache stops keeping blocks (no_thread: put() refuses, so free returns them
// as with LOWTIDE_CACHE=0) and gives back what it holds, warns once, and a
// later large allocation tries again after a backoff (1 s, doubling up to
// 64 s) rather than at every call.
std::atomic<bool> no_thread{false};
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
  if (retry != 0 && now_ns() < retry) return;
  if (thread_started.exchange(true)) return;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = EINVAL;
  for (std::size_t stack = kStackFirst; rc == EINVAL && stack <= kStackMax; stack *= 2) rc = create_thread(stack);
  if (rc == EINVAL) rc = create_thread(0);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc == 0) {
    no_thread.store(false, std::memory_order_relaxed);
    return;
  }
  unsigned fails = failed_starts.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t backoff = std::uint64_t{1'000'000'000} << (fails < kMaxBackoffShift ? fails : kMaxBackoffShift);
  retry_after_ns.store(now_ns() + backoff, std::memory_order_relaxed);
  no_thread.store(true, std::memory_order_relaxed);
  thread_started.store(false);
  purge(true);
  if (!warned_no_thread.exchange(true, std::memory_order_relaxed)) {
    const char* name = strerrorname_np(rc);  // no allocation, unlike strerror
    log::warn("could not start the lowtide-decay thread (pthread_create: {}); freed large blocks are "
              "returned to the OS at free until it starts (retried at large allocations, at most every 64 s)",
              name != nullptr ? name : "error");
  }
}

// Hand out the first `want` granules of entry i (all of it if it has no
// more): the rest stays cached where it is, with its age. Under mu.
std::uint32_t cut(int i, std::uint32_t want) {
  Entry& e = entries[i];
  std::uint32_t s = e.start;
  if (e.n <= want) {
    remove_at(i);
  } else {
    g.arena.split(e.start, e.n, want);
    e.start += want;
    e.n -= want;
    bytes_held -= std::size_t{want} << Arena::kGranuleShift;
  }
  recompute_oldest();
  return s;
}

int oldest() {  // under mu, count > 0
  int o = 0;
  for (int i = 1; i < count; ++i)
    if (entries[i].freed_ns < entries[o].freed_ns) o = i;
  return o;
}

// Take at least `bytes` out of the cache into out[], oldest first; of the
// last entry touched only the granules needed (its front), since joined
// entries can be large. Returns how many entries out[] got. Under mu.
int trim_oldest(std::size_t bytes, Entry* out) {
  int n = 0;
  while (bytes != 0 && count > 0) {
    int o = oldest();
    Entry& e = entries[o];
    std::size_t len = std::size_t{e.n} << Arena::kGranuleShift;
    if (len <= bytes) {
      out[n++] = e;
      bytes -= len;
      remove_at(o);
    } else {
      auto k = static_cast<std::uint32_t>((bytes + G - 1) >> Arena::kGranuleShift);
      g.arena.split(e.start, e.n, k);
      out[n++] = Entry{e.start, k, e.freed_ns};
      e.start += k;
      e.n -= k;
      bytes_held -= std::size_t{k} << Arena::kGranuleShift;
      bytes = 0;
    }
  }
  recompute_oldest();
  return n;
}

}  // namespace

void init() {
  cap = g.config.get(Opt::cache);
  decay_ns = g.config.get(Opt::decay_ms) * 1'000'000u;
  use_thread = g.config.get(Opt::decay_thread) == 0;  // "on" is the first word
}

bool put(std::uint32_t start, std::uint32_t n) {
  std::size_t len = std::size_t{n} << Arena::kGranuleShift;
  // No thread to return it later (see start_thread): return it now.
  if (len > cap || no_thread.load(std::memory_order_relaxed)) return false;
  Entry evicted[kSlots + 1];
  int nev = 0;
  std::uint64_t now = now_ns();
  pthread_mutex_lock(&mu);
  // Join cached neighbours, so blocks cut by take() grow back whole.
  for (int i = 0; i < count;) {
    Entry& e = entries[i];
    if (e.start + e.n == start || start + n == e.start) {
      std::uint32_t s = e.start < start ? e.start : start;
      g.arena.join(s, e.start < start ? e.n : n, e.n + n);
      start = s;
      n += e.n;
      len = std::size_t{n} << Arena::kGranuleShift;
      remove_at(i);
      i = 0;
    } else {
      ++i;
    }
  }
  // Make room: a slot, then bytes, oldest first (possibly the front of the
  // block just joined, if it alone is past the cap).
  if (count == kSlots) {
    int o = oldest();
    evicted[nev++] = entries[o];
    remove_at(o);
  }
  entries[count++] = Entry{start, n, now};
  bytes_held += len;
  if (bytes_held > cap) nev += trim_oldest(bytes_held - cap, evicted + nev);
  recompute_oldest();
  pthread_mutex_unlock(&mu);
  give_back(evicted, nev);
  return true;
}

std::uint32_t take(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, bool for_growth,
                   std::uint32_t* got) {
  if (held_view.load(std::memory_order_relaxed) == 0) return Arena::kNone;
  pthread_mutex_lock(&mu);
  int best = -1;
  for (int i = 0; i < count; ++i) {
    const Entry& e = entries[i];
    if (e.n < need) continue;
    std::uintptr_t addr = reinterpret_cast<std::uintptr_t>(g.arena.addr(e.start + skew_g));
    if (align_g > 1 && addr % (std::uintptr_t{align_g} * G) != 0) continue;
    if (best < 0 || e.n < entries[best].n || (e.n == entries[best].n && e.freed_ns > entries[best].freed_ns))
      best = i;
  }
  std::uint32_t s = Arena::kNone;
  if (best >= 0) {
    last_take_ns.store(now_ns(), std::memory_order_relaxed);
    std::uint32_t want = for_growth ? (need <= UINT32_MAX / 4 ? need * 4 : need) : need;
    *got = want < entries[best].n ? want : entries[best].n;
    s = cut(best, want);
  }
  pthread_mutex_unlock(&mu);
  return s;
}

bool take_at(std::uint32_t at, std::uint32_t n) {
  if (held_view.load(std::memory_order_relaxed) == 0) return false;
  bool ok = false;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < count; ++i) {
    if (entries[i].start == at) {
      if (entries[i].n >= n) {
        cut(i, n);
        last_take_ns.store(now_ns(), std::memory_order_relaxed);
        ok = true;
      }
      break;
    }
  }
  pthread_mutex_unlock(&mu);
  return ok;
}

std::size_t purge(bool all) {
  if (held_view.load(std::memory_order_relaxed) == 0) return 0;
  std::uint64_t now = now_ns();
  std::uint64_t max_age = decay_ns;
  if (age_ns(now, last_take_ns.load(std::memory_order_relaxed)) < decay_ns) max_age = decay_ns * kBusyAgeFactor;
  if (!all && age_ns(now, oldest_ns.load(std::memory_order_relaxed)) < max_age) return 0;
  Entry out[kSlots];
  int n = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < count;) {
    if (all || age_ns(now, entries[i].freed_ns) >= max_age) {
      out[n++] = entries[i];
      remove_at(i);
    } else {
      ++i;
    }
  }
  recompute_oldest();
  pthread_mutex_unlock(&mu);
  return give_back(out, n);
}

void evict_for(std::size_t want) {
  std::size_t held = held_view.load(std::memory_order_relaxed);
  if (held + want <= kMissSlack) return;
  Entry out[kSlots];
  pthread_mutex_lock(&mu);
  int n = bytes_held + want > kMissSlack ? trim_oldest(bytes_held + want - kMissSlack, out) : 0;
  pthread_mutex_unlock(&mu);
  give_back(out, n);
}

void note_large_allocation() {
  if (cap != 0 && !thread_started.load(std::memory_order_relaxed)) start_thread();
}

std::size_t cached_bytes() { return held_view.load(std::memory_order_relaxed); }

void fork_prepare() { pthread_mutex_lock(&mu); }
void fork_parent() { pthread_mutex_unlock(&mu); }
void fork_child() {
  pthread_mutex_init(&mu, nullptr);
  // The decay thread does not exist in the child; the next put starts one.
  thread_started.store(false);
}

}  // namespace lowtide::cache
