#include "mem_limit.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <pthread.h>

#include "large_space.hpp"
#include "platform.hpp"
#include "state.hpp"

namespace lowtide::limit {

namespace {

constexpr std::uint64_t kSampleEveryNs = 100'000'000;       // large calls: at most every 100 ms
constexpr std::uint64_t kRereadEveryNs = 4'000'000'000;     // the cgroup's files: every 4 s
constexpr std::uint64_t kCollectEveryNs = 1'000'000'000;    // mimalloc's retained memory: once a second

std::atomic<std::uint64_t> limit_bytes{0};
std::atomic<unsigned> limit_source{static_cast<unsigned>(cgroup::Source::none)};
// RSS at the last sample minus what the large path had committed then: the
// rest of the process (small blocks, code, stacks). Signed: committed large
// pages not yet touched count in mapped but not in RSS.
std::atomic<std::int64_t> other_bytes{0};
std::atomic<std::uint64_t> sampled_ns{0};
std::atomic<std::uint64_t> reread_ns{0};
std::atomic<std::uint64_t> collected_ns{0};
bool from_cgroup = false;  // set at init: re-read the cgroup's files
// The cgroup's places not found yet: a file discover() needed was not read
// for want of a fork-gate window (a start inside a fork's prepare handler,
// or a thread forking meanwhile). The decay thread discovers again at its
// next tick, not 4 s later: until then a container's limit is not known.
bool undiscovered = false;
void (*release_small_fn)() = nullptr;

// Written at init, read by the decay thread after it (and written by it
// while undiscovered).
cgroup::Location where_v2, where_v1;
// mountinfo is read at init (single-threaded), and again by the decay
// thread alone while undiscovered: a static buffer, since it can be longer
// than a stack should hold; cut at this size, searched as far as it goes.
char scratch[64 << 10];
// Held while the decay thread has mimalloc collect (tick), and across fork.
pthread_mutex_t collect_mu = PTHREAD_MUTEX_INITIALIZER;

// Another thread may have stored a time later than our `now`: that is 0 ago.
std::uint64_t elapsed(std::uint64_t now, std::uint64_t then) { return now > then ? now - then : 0; }

// Runs inside malloc (a large allocation) too: errno is the caller's, and a
// failed read (no /proc in a chroot, EMFILE) still counts as a sample, so it
// is not retried at every call.
void sample() {
  const int saved = errno;
  sampled_ns.store(pal::now_ns(), std::memory_order_relaxed);
  const std::size_t rss = pal::rss_bytes();
  errno = saved;
  if (rss == 0) return;  // unreadable: keep the old estimate
  const std::size_t mapped = large::space.mapped.load(std::memory_order_relaxed);
  other_bytes.store(static_cast<std::int64_t>(rss) - static_cast<std::int64_t>(mapped), std::memory_order_relaxed);
}

std::int64_t resident() {
  return other_bytes.load(std::memory_order_relaxed) +
         static_cast<std::int64_t>(large::space.mapped.load(std::memory_order_relaxed));
}

// The cgroup's places and limit, found afresh (at init, and until one
// discovery read every file it needed). A refused discovery's limit is
// taken only where it found one (it can only have missed a lower one).
void discover() {
  const cgroup::Found f = cgroup::discover(g.config.str(Opt::cgroup_root), scratch, sizeof scratch, &where_v2, &where_v1);
  undiscovered = f.refused;
  if (f.refused && f.limit == 0) return;
  limit_bytes.store(f.limit, std::memory_order_relaxed);
  limit_source.store(static_cast<unsigned>(f.source), std::memory_order_relaxed);
}

// A file not read for want of a fork-gate window (a program thread forking
// in a tight loop) keeps the limit as it was: dropping it to "none" then
// would let the cache fill up to its cap under a container's limit.
void reread() {
  if (undiscovered) {
    discover();
    return;
  }
  bool refused = false;
  std::uint64_t l = cgroup::read_limit(where_v2, &refused);
  if (refused) return;
  cgroup::Source s = cgroup::Source::cgroup_v2;
  if (l == 0) {
    l = cgroup::read_limit(where_v1, &refused);
    if (refused) return;
    s = l != 0 ? cgroup::Source::cgroup_v1 : cgroup::Source::none;
  }
  limit_bytes.store(l, std::memory_order_relaxed);
  limit_source.store(static_cast<unsigned>(s), std::memory_order_relaxed);
}

}  // namespace

std::size_t room_for(std::uint64_t limit, std::int64_t resident_bytes, std::size_t held) {
  if (limit == 0) return SIZE_MAX;
  const auto target = static_cast<std::int64_t>(limit - limit / 8);
  std::int64_t other = resident_bytes - static_cast<std::int64_t>(held);
  if (other < 0) other = 0;
  return other < target ? static_cast<std::size_t>(target - other) : 0;
}

void init(void (*release_small)()) {
  release_small_fn = release_small;
  const std::uint64_t v = g.config.get(Opt::limit);
  from_cgroup = false;
  undiscovered = false;
  limit_bytes.store(0, std::memory_order_relaxed);
  limit_source.store(static_cast<unsigned>(cgroup::Source::none), std::memory_order_relaxed);
  if (v != kSizeWord) {
    limit_bytes.store(v, std::memory_order_relaxed);
    limit_source.store(static_cast<unsigned>(v != 0 ? cgroup::Source::env : cgroup::Source::none),
                       std::memory_order_relaxed);
  } else {
    from_cgroup = true;
    discover();
    reread_ns.store(pal::now_ns(), std::memory_order_relaxed);
  }
  if (limit_bytes.load(std::memory_order_relaxed) != 0) sample();
}

void tick() {
  const std::uint64_t now = pal::now_ns();
  if (from_cgroup && (undiscovered || elapsed(now, reread_ns.load(std::memory_order_relaxed)) >= kRereadEveryNs)) {
    reread_ns.store(now, std::memory_order_relaxed);
    reread();
  }
  const std::uint64_t l = limit_bytes.load(std::memory_order_relaxed);
  if (l == 0) return;
  sample();
  if (resident() >= static_cast<std::int64_t>(l) && release_small_fn != nullptr &&
      elapsed(now, collected_ns.load(std::memory_order_relaxed)) >= kCollectEveryNs) {
    collected_ns.store(now, std::memory_order_relaxed);
    // Under collect_mu: a fork must not land inside mimalloc's collect (a
    // child could inherit its abandoned-segment reader count and spin on it
    // forever); fork_prepare takes it first.
    pthread_mutex_lock(&collect_mu);
    release_small_fn();
    pthread_mutex_unlock(&collect_mu);
    sample();  // what that gave back
  }
}

void maybe_sample() {
  if (limit_bytes.load(std::memory_order_relaxed) == 0) return;
  const std::uint64_t now = pal::now_ns();
  std::uint64_t last = sampled_ns.load(std::memory_order_relaxed);
  // One thread takes the sample; the others go on with the last one.
  if (elapsed(now, last) >= kSampleEveryNs && sampled_ns.compare_exchange_strong(last, now, std::memory_order_relaxed))
    sample();
}

std::size_t cache_room(std::size_t held) {
  const std::uint64_t l = limit_bytes.load(std::memory_order_relaxed);
  return l == 0 ? SIZE_MAX : room_for(l, resident(), held);
}

void fork_prepare() { pthread_mutex_lock(&collect_mu); }
void collect_guarded(void (*fn)()) {
  pthread_mutex_lock(&collect_mu);
  fn();
  pthread_mutex_unlock(&collect_mu);
}
bool collect_if_idle(void (*fn)()) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const bool got = pthread_mutex_trylock(&collect_mu) == 0;
  if (got) {
    fn();
    pthread_mutex_unlock(&collect_mu);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return got;
}
void fork_parent() { pthread_mutex_unlock(&collect_mu); }
void fork_child() { pthread_mutex_init(&collect_mu, nullptr); }

std::uint64_t current() { return limit_bytes.load(std::memory_order_relaxed); }
cgroup::Source source() { return static_cast<cgroup::Source>(limit_source.load(std::memory_order_relaxed)); }

}  // namespace lowtide::limit
