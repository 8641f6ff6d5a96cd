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
#include "orphan.hpp"
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
  // The peak first, the held bytes released after it: a reader that sees
  // the new held bytes (cached_bytes, acquire) and then reads the peak (the
  // stats table's order) never sees it below them.
  if (bytes_held_ > peak_view_.load(std::memory_order_relaxed)) peak_view_.store(bytes_held_, std::memory_order_relaxed);
  held_view_.store(bytes_held_, std::memory_order_release);
}

void ReuseCache::account_time(std::uint64_t now) {  // under mu_
  const std::uint64_t then = changed_ns_.load(std::memory_order_relaxed);
  if (now > then) {
    const double add = static_cast<double>(bytes_held_) * static_cast<double>(now - then);
    byte_ns_.store(byte_ns_.load(std::memory_order_relaxed) + add, std::memory_order_relaxed);
    changed_ns_.store(now, std::memory_order_relaxed);
  }
}

// Lock-free, for the report (which may run in a signal handler): the three
// views may be a change apart, a few milliseconds of one level at most.
// Never less than a value it returned before (docs/reliability.md no.
// 105): a change accounts the time up to the `now` its thread read before
// it took the lock, which may be earlier than the `now` of a reading made
// meanwhile. That reading counted the old level up to its own time; once
// the change has lowered the level from its earlier time on (a purge, a
// take), the next reading summed less, and a Prometheus counter that goes
// down is a reset to rate(). The three loads here, not one reading, could
// do the same. So the sum is taken as at least the last one returned: a
// reading ahead of the level's true integral holds until it catches up.
std::uint64_t ReuseCache::byte_seconds(std::uint64_t now) const {
  double v = byte_ns_.load(std::memory_order_relaxed);
  const std::uint64_t then = changed_ns_.load(std::memory_order_relaxed);
  if (now > then) v += static_cast<double>(cached_bytes()) * static_cast<double>(now - then);
  const auto sum = static_cast<std::uint64_t>(v / 1e9);
  std::uint64_t seen = seconds_seen_.load(std::memory_order_relaxed);
  while (sum > seen && !seconds_seen_.compare_exchange_weak(seen, sum, std::memory_order_relaxed)) {
  }
  return sum > seen ? sum : seen;
}

// A block was reused `age` after it was freed (a take, or a miss a block
// given back early would have served): the oldest such age of this decay
// period, the period before kept too, so keep_age never forgets a reuse
// before a full period has passed. Under mu_.
void ReuseCache::note_reuse(std::uint64_t now, std::uint64_t age) { reuse_age_.note(now, age, decay_ns_); }

// A large allocation asked the cache for a block at `now` (served or not):
// the gap since the previous request feeds keep_age's idle rule, kept in two
// buckets rotated each decay period as note_reuse's ages are.
void ReuseCache::note_request(std::uint64_t now) {
  const std::uint64_t prev = last_request_ns_.exchange(now, std::memory_order_relaxed);
  // A gap of a decay period or more is not a pace the cache serves (what
  // was cached before it has decayed): recorded, it would turn the idle
  // rule off for the batch that follows an idle start (review).
  if (prev == kNoRequest || now <= prev || now - prev >= decay_ns_) return;
  request_gap_.note(now, now - prev, decay_ns_);
}

std::uint64_t ReuseCache::keep_age(std::uint64_t now) const {
  std::uint64_t most = decay_ns_;
  if (age_ns(now, last_take_ns_.load(std::memory_order_relaxed)) < decay_ns_) most = decay_ns_ * kBusyAgeFactor;
  if (min_age_ns_ >= decay_ns_) return most;  // not adapted (configure)
  // Idle: the process has gone longer without asking for a large block than
  // it recently went between two requests (with a margin, and at least the
  // minimum age). What it reused while it was asking says nothing about
  // blocks freed after it stopped: the seed workload's second batch, freed
  // for good, was kept 0.35-0.5 s by the ages its 4 threads reused the
  // first batch at (up to 470 ms), against 0.15 s with 1 thread.
  // (A gap recorded means two requests were: last_request_ns_ is set.)
  if (const std::uint64_t gap = request_gap_.get(now, decay_ns_); gap != 0) {
    std::uint64_t idle_after = reuse_keep(gap);  // gap < decay_ns_ (note_request)
    if (idle_after < min_age_ns_) idle_after = min_age_ns_;
    if (age_ns(now, last_request_ns_.load(std::memory_order_relaxed)) >= idle_after) return min_age_ns_;
  }
  // Reuses older than two periods are forgotten.
  const std::uint64_t seen = reuse_age_.get(now, decay_ns_);
  std::uint64_t keep = seen <= most / 2 ? reuse_keep(seen) : most;
  return keep < min_age_ns_ ? min_age_ns_ : keep;
}

void ReuseCache::remove_at(int i) {  // under mu_
  bytes_held_ -= Extent::bytes_of(entries_[i].n);
  entries_[i] = entries_[--count_];
}

namespace {
// This thread's own share of in_flight_, for a forked child's reset
// (reset_after_fork). Changed with in_flight_ under the cache's lock, which
// fork's prepare handler takes, so a fork (a signal handler's, on this
// thread) never falls between the two. Initial-exec TLS, constant-
// initialised: no allocation to reach it.
thread_local std::size_t t_own_in_flight = 0;
}  // namespace

// Give extents back to the OS: outside the lock, since dropping many pages
// takes a while.
std::size_t ReuseCache::give_back(const Entry* out, const Reason* why, int n) {
  std::size_t total = 0;
  for (int i = 0; i < n; ++i) {
    const Extent e{out[i].start, out[i].n};
    // Arena::give_back moves the arena's epoch before it returns, so
    // settle, seeing nothing in flight, sees the epoch moved (its room is
    // free already) and tries again (review).
    arena_.give_back(e.start, e.n, deps_.decommit, deps_.drop_writable);
    lock();  // (see t_own_in_flight)
    in_flight_.fetch_sub(e.bytes(), std::memory_order_release);
    t_own_in_flight -= e.bytes();
    unlock();
    total += e.bytes();
    if (deps_.returned != nullptr) deps_.returned(e.bytes(), why[i]);
  }
  Arena::own_unfinished_add(-1);  // (unlock_giving's)
  return total;
}

// Entries taken out for give_back: counted as under way before the lock is
// let go, so that at every moment a cached extent is either in the cache or
// counted in in_flight_ (settle relies on it).
void ReuseCache::unlock_giving(const Entry* out, int n) {
  std::size_t bytes = 0;
  for (int i = 0; i < n; ++i) bytes += Extent::bytes_of(out[i].n);
  Arena::own_unfinished_add(1);  // until give_back, which always follows, ends
  if (bytes != 0) in_flight_.fetch_add(bytes, std::memory_order_relaxed);
  t_own_in_flight += bytes;
  unlock();
}

// A block taken on trial (take_at(..., false)) is back in the cache, given
// back, or in use: the epoch first, as give_back.
void ReuseCache::end_trial(std::uint32_t n) {
  trials_ended_.fetch_add(1, std::memory_order_release);
  lock();  // (see t_own_in_flight)
  in_flight_.fetch_sub(Extent::bytes_of(n), std::memory_order_release);
  t_own_in_flight -= Extent::bytes_of(n);
  unlock();
  Arena::own_unfinished_add(-1);  // (take_at's)
}

void ReuseCache::reset_after_fork() {
  pthread_mutex_init(&mu_, nullptr);
  // Another thread's give-back does not go on in the child
  // (large::fork_child_reclaim gives its run back); this thread's own, where
  // a signal handler that interrupted it forked, does once the handler
  // returns, and takes its bytes off: they stay counted (from 0 the count
  // wrapped, and every miss that found no room waited settle's bound).
  in_flight_.store(t_own_in_flight, std::memory_order_relaxed);
  // Thread ids change in the child (its one thread's too): a rest kept
  // for a parent's thread would be passed over by everyone there.
  for (int i = 0; i < count_; ++i) entries_[i].owner = 0;
}

ReuseCache::Settle ReuseCache::settle_start() const {
  return Settle{trials_ended_.load(std::memory_order_acquire), arena_.hidings_ended(), 0, false};
}

bool ReuseCache::settle(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, Settle* st) {
  // Taking the lock orders this after any purge or eviction that has taken
  // entries out (and lowered the lock-free view purge(true) reads): by its
  // unlock they are counted in in_flight_.
  lock();
  unlock();
  const std::uint64_t now = pal::now_ns();
  if (st->until == 0) st->until = now + settle_ns_;
  // Only if the request could fit once what is under way is back: where it
  // cannot, a range full of live blocks would make every such miss wait (a
  // first fix that waited for every give-back made 200 never-fitting
  // requests under churn take 3.96 s instead of 0.07). The free extents and
  // the runs the arena's give-backs will leave (with the free neighbours
  // they hold), aligned as asked, and what is taken out of the cache as if
  // it joined any of them: an over-estimate, so a fitting request never
  // gives up early; one nothing there will be can hold does not wait, nor
  // try again as give-backs end (under churn they end all the time).
  auto may_fit = [&](std::size_t flying) {
    const std::size_t flying_g = (flying + G - 1) / G;
    const auto extra = static_cast<std::uint32_t>(flying_g < UINT32_MAX ? flying_g : UINT32_MAX);
    return arena_.may_fit_once_settled(need, align_g, skew_g, extra);
  };
  // What has ended since the last look: a trial (its block is cached again
  // or gone, and the caller empties the cache before its try: worth a try
  // as such; trials are rare, misses only), or give-backs (worth a try if
  // the request may fit now). -1: nothing.
  auto ended = [&](std::size_t flying) {
    const std::uint64_t trials = trials_ended_.load(std::memory_order_acquire);
    const std::uint64_t hidings = arena_.hidings_ended();
    const bool trial = trials != st->trials, hidden = hidings != st->hidings;
    st->trials = trials;
    st->hidings = hidings;
    if (trial) return 1;
    if (hidden) return may_fit(flying) ? 1 : 0;
    return -1;
  };
  // The bound covers the caller's whole loop of tries: under steady churn
  // give-backs may keep ending (and each one would be worth a try). Past
  // it, one last try if one ended since the previous try, then no.
  if (now >= st->until) {
    const std::size_t flying = in_flight_.load(std::memory_order_acquire);
    if (st->last_try_made) return false;
    st->last_try_made = true;
    return ended(flying) == 1;
  }
  bool fits_checked = false;
  for (;;) {
    // The counts first, then the epochs (the give-backs and trials move
    // them the other way round): nothing under way means every ended one's
    // epoch step is seen here. One ended since the last try (also between
    // it and this call): the room it made is worth a try at once. Under
    // way: the cache's entries taken out (in flight) or on trial, and any
    // arena give-back, the cache's or not (a free the cache does not keep,
    // a realloc's old extent, a shrunk tail), which holds the free extents
    // next to its own out of the free lists while it re-maps.
    const std::size_t flying = in_flight_.load(std::memory_order_acquire);
    const int hiding = arena_.hiding();
    if (const int e = ended(flying); e >= 0) return e == 1;
    if (flying == 0 && hiding == 0) return false;
    if (!fits_checked) {
      if (!may_fit(flying)) return false;
      fits_checked = true;
    }
    // Bounded: one give-back lasts two system calls that drop the run's
    // pages (~1 ms a GiB), but the thread making them may be descheduled.
    if (pal::now_ns() >= st->until) return false;
    pal::yield();
  }
}

// Split the first k granules (fewer than it has) off entry e, which keeps
// the rest with its age and a resident bound no larger than the rest; the
// front, out of the cache, is returned. Under mu_.
ReuseCache::Entry ReuseCache::split_front(Entry& e, std::uint32_t k) {
  arena_.split(e.start, e.n, k);
  const Entry front{e.start, k, e.freed_ns};
  e.start += k;
  e.n -= k;
  e.owner = 0;  // no block is right in front of it now (a cut says whose is)
  handed_out(e, k);
  return front;
}

// k granules of entry e (already shortened to what stays) left the cache:
// the bytes held, and e's resident bound no larger than what is left. Under mu_.
void ReuseCache::handed_out(Entry& e, std::uint32_t k) {
  bytes_held_ -= Extent::bytes_of(k);
  if (e.res != kUnmeasured && e.res > Extent::bytes_of(e.n)) e.res = Extent::bytes_of(e.n);
}

// Hand out the first `want` granules of entry i (all of it if it has no
// more): the rest stays cached where it is, with its age, kept for `who`,
// whose block is now right in front of it. Under mu_.
std::uint32_t ReuseCache::cut(int i, std::uint32_t want, std::uint32_t who) {
  Entry& e = entries_[i];
  std::uint32_t s = e.start;
  if (e.n <= want) {
    remove_at(i);
  } else {
    split_front(e, want);
    e.owner = who;
  }
  recompute_oldest();
  return s;
}

// Hand out the last `want` granules of entry i (fewer than it has): its
// front stays cached, still kept for the block in front of it. Under mu_.
std::uint32_t ReuseCache::cut_back(int i, std::uint32_t want) {
  Entry& e = entries_[i];
  const std::uint32_t keep = e.n - want;
  arena_.split(e.start, e.n, keep);
  e.n = keep;
  handed_out(e, want);
  recompute_oldest();
  return e.start + keep;
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
int ReuseCache::trim_oldest(std::size_t bytes, Entry* out, Reason* why_out, Reason why) {
  int n = 0;
  while (bytes != 0 && count_ > 0) {
    int o = oldest();
    Entry& e = entries_[o];
    std::size_t len = Extent::bytes_of(e.n);
    why_out[n] = why;
    // Whole when the granules needed are all of it (bytes within its last
    // granule): cutting would leave an empty entry behind.
    if (len <= bytes || Extent::granules_of(bytes + G - 1) >= e.n) {
      out[n++] = e;
      bytes -= len < bytes ? len : bytes;
      remove_at(o);
    } else {
      auto k = Extent::granules_of(bytes + G - 1);
      out[n++] = split_front(e, k);
      bytes = 0;
    }
  }
  recompute_oldest();
  return n;
}

// Join the cached neighbours of [*start, *start + *n) to it, so blocks cut
// by take() grow back whole. *owner: whom the joined extent is kept for,
// the caller's unless a neighbour in front was joined, whose owner it then
// takes (that one's block, if any, is what is in front now). Under mu_.
void ReuseCache::join_neighbours(std::uint32_t* start, std::uint32_t* n, std::uint32_t* owner) {
  for (int i = 0; i < count_;) {
    Entry& e = entries_[i];
    if (e.start + e.n == *start || *start + *n == e.start) {
      std::uint32_t s = e.start < *start ? e.start : *start;
      if (e.start < *start) *owner = e.owner;
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

bool ReuseCache::put(std::uint32_t start, std::uint32_t n, std::uint64_t freed_ns, std::uint32_t owner) {
  // Refused: no thread to return it later (see start_thread), or no room
  // under the memory limit even for this block alone; return it now.
  const std::size_t len = Extent::bytes_of(n);
  if (len > allowed(cached_bytes() + len) || refusing_.load(std::memory_order_relaxed)) return false;
  Entry evicted[kSlots + 1];
  Reason why[kSlots + 1];
  int nev = 0;
  std::uint64_t now = deps_.now_ns();
  lock();
  account_time(now);
  // A free (not a block back from a trial, which was never counted drawn).
  if (freed_ns == 0) note_drawn(now, 0, len);
  join_neighbours(&start, &n, &owner);
  // Make room: a slot, then bytes, oldest first (possibly the front of the
  // block just joined, if it alone is past the cap).
  if (count_ == kSlots) {
    int o = oldest();
    why[nev] = Reason::room;
    evicted[nev++] = entries_[o];
    remove_at(o);
  }
  const bool was_empty = bytes_held_ == 0;
  entries_[count_++] = Entry{start, n, freed_ns != 0 ? freed_ns : now, kUnmeasured, ++gen_, owner};
  bytes_held_ += Extent::bytes_of(n);
  if (std::size_t most = allowed(bytes_held_); bytes_held_ > most)
    nev += trim_oldest(bytes_held_ - most, evicted + nev, why + nev, most < cap_ ? Reason::limit : Reason::room);
  recompute_oldest();
  unlock_giving(evicted, nev);
  give_back(evicted, why, nev);
  if (was_empty && deps_.kept != nullptr) deps_.kept();
  return true;
}

// The smallest entry of at least `need` granules aligned as asked, the most
// recently freed of equals (its pages are the likeliest still in cache);
// -1 if none. Entries kept for another thread than `who` are passed over
// unless who is kAnyone. Under mu_.
int ReuseCache::best_fit(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, std::uint32_t who,
                         bool largest) const {
  int best = -1;
  for (int i = 0; i < count_; ++i) {
    const Entry& e = entries_[i];
    if (e.n < need) continue;
    if (who != kAnyone && e.owner != 0 && e.owner != who) continue;
    std::uintptr_t addr = reinterpret_cast<std::uintptr_t>(arena_.addr(e.start + skew_g));
    if (align_g > 1 && addr % (std::uintptr_t{align_g} * G) != 0) continue;
    if (best < 0 || (largest ? e.n > entries_[best].n : e.n < entries_[best].n) ||
        (e.n == entries_[best].n && e.freed_ns > entries_[best].freed_ns))
      best = i;
  }
  return best;
}

std::uint32_t ReuseCache::take(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, bool for_growth,
                               std::uint32_t* got, std::uint32_t prefer) {
  const std::uint64_t now = deps_.now_ns();
  note_request(now);
  if (cached_bytes() == 0) return Arena::kNone;
  const std::uint32_t who = self();
  lock();
  int best = prefer > need ? best_fit(prefer, align_g, skew_g, who) : -1;
  if (best < 0) best = best_fit(need, align_g, skew_g, who, prefer > need);
  // None but another thread's rests fit: the back of one, so that its
  // block still grows into the front (an alignment is met only at an
  // entry's start, so an aligned request takes the front, as before).
  bool back = false;
  if (best < 0 && who != 0) {
    best = best_fit(need, align_g, skew_g, kAnyone);
    back = best >= 0 && align_g <= 1 && skew_g == 0 && entries_[best].owner != 0;
  }
  std::uint32_t s = Arena::kNone;
  std::size_t fault = 0;
  if (best >= 0) {
    last_take_ns_.store(now, std::memory_order_relaxed);
    account_time(now);
    note_reuse(now, age_ns(now, entries_[best].freed_ns));
    // A back cut hands out the need only: more would eat the room of the
    // block in front.
    std::uint32_t want = for_growth && !back ? (need <= UINT32_MAX / 4 ? need * 4 : need) : need;
    *got = want < entries_[best].n ? want : entries_[best].n;
    fault = hand_fault(entries_[best], *got);
    note_drawn(now, Extent::bytes_of(*got), 0);
    // The back only where a front is left (else the entry goes whole).
    s = back && *got < entries_[best].n ? cut_back(best, *got) : cut(best, want, who);
  }
  unlock();
  if (fault != 0) evict_for(fault, 0);
  return s;
}

// What handing out the first `handed` granules of e may fault: their length
// less the resident bytes they hold at least (e's bound, less all of the
// rest). 0 for an entry not measured: taken as resident, as before the
// slack counted resident bytes (entries freed since the last miss).
std::size_t ReuseCache::hand_fault(const Entry& e, std::uint32_t handed) {
  if (e.res == kUnmeasured) return 0;
  const std::size_t len = Extent::bytes_of(e.n);
  const std::size_t got = Extent::bytes_of(handed < e.n ? handed : e.n);
  const std::size_t rest = len - got;
  const std::size_t least = e.res > rest ? e.res - rest : 0;
  return got - least;
}

std::uint32_t ReuseCache::largest_below(std::uint32_t need, std::uint32_t least, std::uint32_t* n,
                                        std::uint64_t* freed_ns) const {
  if (cached_bytes() == 0) return Arena::kNone;
  auto& self = const_cast<ReuseCache&>(*this);
  self.lock();
  // Another thread's rest only if nothing else will do: taken whole, it
  // would stop that thread's block growing in place (ReuseCache::take).
  const std::uint32_t who = this->self();
  // Ranked: not another thread's first, then longer, then freed later.
  int best = -1;
  bool foreign = true;
  for (int i = 0; i < count_; ++i) {
    const Entry& e = entries_[i];
    if (e.n < least || e.n >= need) continue;
    const bool f = e.owner != 0 && e.owner != who;
    if (best >= 0) {
      const Entry& b = entries_[best];
      if (f != foreign ? f : e.n < b.n || (e.n == b.n && e.freed_ns <= b.freed_ns)) continue;
    }
    best = i;
    foreign = f;
  }
  std::uint32_t s = Arena::kNone;
  if (best >= 0) {
    s = entries_[best].start;
    *n = entries_[best].n;
    *freed_ns = entries_[best].freed_ns;
  }
  self.unlock();
  return s;
}

void ReuseCache::note_taken(std::uint64_t freed_ns) {
  const std::uint64_t now = deps_.now_ns();
  lock();
  note_reuse(now, age_ns(now, freed_ns));
  unlock();
  last_take_ns_.store(now, std::memory_order_relaxed);
}

bool ReuseCache::take_at(std::uint32_t at, std::uint32_t n, bool as_reuse, std::uint32_t* owner) {
  if (cached_bytes() == 0) return false;
  bool ok = false;
  std::size_t fault = 0;
  const std::uint32_t who = self();
  lock();
  for (int i = 0; i < count_; ++i) {
    if (entries_[i].start == at) {
      if (entries_[i].n >= n) {
        const std::uint64_t now = deps_.now_ns();
        account_time(now);
        if (as_reuse) {
          note_reuse(now, age_ns(now, entries_[i].freed_ns));
          note_request(now);  // a realloc growing into the cache asks too
          note_drawn(now, Extent::bytes_of(n), 0);
        }
        fault = hand_fault(entries_[i], n);
        if (owner != nullptr) *owner = entries_[i].owner;
        cut(i, n, who);  // the rest is still right behind the grown block
        if (as_reuse) last_take_ns_.store(now, std::memory_order_relaxed);
        // On trial: out of the cache, counted as coming back until
        // end_trial (before the lock goes: settle's invariant).
        else {
          Arena::own_unfinished_add(1);  // until end_trial
          in_flight_.fetch_add(Extent::bytes_of(n), std::memory_order_relaxed);
          t_own_in_flight += Extent::bytes_of(n);
        }
        ok = true;
      }
      break;
    }
  }
  unlock();
  if (fault != 0) evict_for(fault, 0);
  return ok;
}

std::size_t ReuseCache::purge(bool all) {
  const std::size_t held = cached_bytes();
  if (held == 0) return 0;
  std::uint64_t now = deps_.now_ns();
  const std::uint64_t max_age = keep_age(now);
  if (!all && age_ns(now, oldest_ns_.load(std::memory_order_relaxed)) < max_age && held <= allowed(held)) return 0;
  // Past the decay period an entry goes back for decay; younger, because the
  // process has not been reusing blocks that old (demand): remembered as a
  // ghost, so a miss it would have served teaches keep_age.
  const std::uint64_t decay = age_ns(now, last_take_ns_.load(std::memory_order_relaxed)) < decay_ns_
                                  ? decay_ns_ * kBusyAgeFactor
                                  : decay_ns_;
  Entry out[kSlots];
  Reason why[kSlots];
  int n = 0;
  lock();
  account_time(now);
  for (int i = 0; i < count_;) {
    const std::uint64_t age = age_ns(now, entries_[i].freed_ns);
    if (all || age >= max_age) {
      why[n] = all || age >= decay ? Reason::decay : Reason::demand;
      if (!all && why[n] == Reason::demand) {
        ghosts_[next_ghost_] = Ghost{Extent::bytes_of(entries_[i].n), entries_[i].freed_ns};
        next_ghost_ = (next_ghost_ + 1) % kGhosts;
        have_ghosts_.store(true, std::memory_order_relaxed);
      }
      out[n++] = entries_[i];
      remove_at(i);
    } else {
      ++i;
    }
  }
  // The process grew towards its memory limit: what is left, oldest first,
  // down to what the limit leaves room for. (At most kSlots entries in all:
  // trim_oldest takes only entries still cached.)
  if (std::size_t most = allowed(bytes_held_); bytes_held_ > most)
    n += trim_oldest(bytes_held_ - most, out + n, why + n, most < cap_ ? Reason::limit : Reason::room);
  recompute_oldest();
  unlock_giving(out, n);
  return give_back(out, why, n);
}

void ReuseCache::evict_for(std::size_t want, std::size_t request) {
  // A miss that a block given back early would have served: a reuse at the
  // age that block would have now (the ghost is used up).
  if (request != 0 && have_ghosts_.load(std::memory_order_relaxed)) {
    const std::uint64_t now = deps_.now_ns();
    lock();
    int hit = -1;
    for (int i = 0; i < kGhosts; ++i) {
      const Ghost& gh = ghosts_[i];
      if (gh.bytes == 0) continue;
      if (age_ns(now, gh.freed_ns) >= decay_ns_) {
        ghosts_[i] = Ghost{};  // too old to have been kept anyway
        continue;
      }
      if (gh.bytes >= request && (hit < 0 || gh.bytes < ghosts_[hit].bytes)) hit = i;
    }
    if (hit >= 0) {
      note_reuse(now, age_ns(now, ghosts_[hit].freed_ns));
      ghosts_[hit] = Ghost{};
    }
    bool any = false;
    for (const Ghost& gh : ghosts_) any = any || gh.bytes != 0;
    have_ghosts_.store(any, std::memory_order_relaxed);
    unlock();
  }
  if (cached_bytes() + want <= kMissSlack) return;
  Entry out[kSlots];
  Reason why[kSlots];
  // (Without Deps::resident nothing is measured: every entry and the fault
  // count their lengths.)
  if (deps_.resident != nullptr) measure_entries();
  const std::uint64_t now = deps_.now_ns();
  std::size_t frac = resident_frac_.get(now, decay_ns_);
  frac = frac == 0 ? kFracOne : frac - 1;  // none measured lately: all of it
  // want * frac / kFracOne, rounded up, without overflow.
  const std::size_t want_cost = want / kFracOne * frac + ((want % kFracOne) * frac + kFracOne - 1) / kFracOne;
  lock();
  account_time(now);
  // Kept: the slack, or while the process draws on the cache (a round of
  // buffers built from the last one's, by several threads whose blocks
  // outgrow the cached ones), up to what it drew lately, less the fault:
  // RSS then stays flat across the miss instead of dropping what the next
  // takes would use. Before, every miss cut the cache to the slack, and in
  // seed-4t one block outgrowing every cached extent gave back ~100 MiB
  // the other threads' next buffers faulted in again.
  std::size_t most = want_cost < kMissSlack ? kMissSlack - want_cost : 0;
  std::size_t cost = 0;
  for (int i = 0; i < count_; ++i) cost += cost_of(entries_[i]);
  std::size_t keep = drawn(now);
  if (keep > cost) keep = cost;
  if (keep > want_cost && keep - want_cost > most) most = keep - want_cost;
  int n = trim_to_cost(cost, most, out, why);
  unlock_giving(out, n);
  give_back(out, why, n);
}

void ReuseCache::note_drawn(std::uint64_t now, std::size_t out, std::size_t in) {
  if (age_ns(now, drawn_.since) >= decay_ns_) {
    drawn_.before = age_ns(now, drawn_.since) < 2 * decay_ns_ ? drawn_.now : 0;
    drawn_.now = 0;
    drawn_.since = now;
  }
  drawn_.now += out;
  // A free makes up for takes of this period first, then of the one before.
  const std::size_t here = in < drawn_.now ? in : drawn_.now;
  drawn_.now -= here;
  in -= here;
  drawn_.before -= in < drawn_.before ? in : drawn_.before;
}

std::size_t ReuseCache::drawn(std::uint64_t now) const {
  const std::uint64_t age = age_ns(now, drawn_.since);
  if (age >= 2 * decay_ns_) return 0;
  return drawn_.now + (age < decay_ns_ ? drawn_.before : 0);
}

std::size_t ReuseCache::cost_of(const Entry& e) {
  const std::size_t len = Extent::bytes_of(e.n);
  return e.res < len ? e.res : len;
}

// Measure the resident bytes of every entry not yet measured: the entries
// are copied under the lock, measured outside it (Deps::resident walks page
// tables; other threads' frees and takes go on), and each measure is stored
// if its entry is still there, unchanged. Cached pages are never written,
// so a measure stays an upper bound for as long as the entry is cached
// (khugepaged could fill a region the program advised MADV_HUGEPAGE; it
// scans a few MiB every 10 s by default).
void ReuseCache::measure_entries() {
  Entry todo[kSlots];
  int k = 0;
  lock();
  for (int i = 0; i < count_; ++i)
    if (entries_[i].res == kUnmeasured) todo[k++] = entries_[i];
  unlock();
  if (k == 0) return;
  if (deps_.resident_many != nullptr) {
    for (int j0 = 0; j0 < k; j0 += pal::kSpansMax) {
      const int m = k - j0 < pal::kSpansMax ? k - j0 : pal::kSpansMax;
      pal::Span spans[pal::kSpansMax];
      std::size_t res[pal::kSpansMax];
      for (int j = 0; j < m; ++j) spans[j] = {arena_.addr(todo[j0 + j].start), Extent::bytes_of(todo[j0 + j].n)};
      deps_.resident_many(spans, m, res);
      for (int j = 0; j < m; ++j) todo[j0 + j].res = res[j];
    }
  } else {
    for (int j = 0; j < k; ++j) todo[j].res = deps_.resident(arena_.addr(todo[j].start), Extent::bytes_of(todo[j].n));
  }
  const std::uint64_t now = deps_.now_ns();
  lock();
  for (int j = 0; j < k; ++j) {
    const std::size_t len = Extent::bytes_of(todo[j].n);
    const std::size_t res = todo[j].res < len ? todo[j].res : len;
    for (int i = 0; i < count_; ++i) {
      Entry& e = entries_[i];
      if (e.gen == todo[j].gen && e.start == todo[j].start && e.n == todo[j].n && e.res == kUnmeasured) {
        e.res = res;
        // (Only a measure stored teaches the fraction: one of a block
        // rewritten meanwhile says nothing of how the process writes. A
        // short one less than half resident counts as kFracLeast long:
        // see there.)
        const std::size_t per = len < kFracLeast && res < len / 2 ? kFracLeast : len;
        resident_frac_.note(now, (res * kFracOne + per - 1) / per + 1, decay_ns_);
        break;
      }
    }
  }
  unlock();
}

// Give back entries, oldest first, until what is left costs at most `most`
// (cost_of: resident bytes where measured, else length). Of the last entry
// touched only the front is cut when its back, kept, fits in what is left
// (a dense entry gives back about the excess, as trim_oldest; a sparse one
// nearly all of it: where its resident pages lie is not known). Under mu_.
int ReuseCache::trim_to_cost(std::size_t cost, std::size_t most, Entry* out, Reason* why_out) {
  int n = 0;
  while (cost > most && count_ > 0) {
    const int o = oldest();
    Entry& e = entries_[o];
    const std::size_t c = cost_of(e);
    why_out[n] = Reason::room;
    // Keep at most the back `c - (cost - most)` bytes of it (its bound then
    // is at most that), in whole granules.
    const std::size_t keep = cost - most < c ? c - (cost - most) : 0;
    const auto keep_g = static_cast<std::uint32_t>(keep / G);
    if (keep_g == 0 || keep_g >= e.n) {
      out[n++] = e;
      cost -= c;
      remove_at(o);
    } else {
      out[n++] = split_front(e, e.n - keep_g);
      cost = cost - c + cost_of(e);
    }
  }
  recompute_oldest();
  return n;
}

std::size_t ReuseCache::trim(std::size_t bytes, Reason why) {
  Entry out[kSlots];
  Reason whys[kSlots];
  lock();
  account_time(deps_.now_ns());
  int n = trim_oldest(bytes, out, whys, why);
  unlock_giving(out, n);
  return give_back(out, whys, n);
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
  // The age rule is purge()'s (keep_age).
  std::uint64_t now = deps_.now_ns();
  const std::uint64_t max_age = keep_age(now);
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
    if (e.res != kUnmeasured && e.res > Extent::bytes_of(e.n)) why = "cache: an entry's resident bound is past its length";
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

void returned_to_os(std::size_t bytes, Reason why) { account_returned(bytes, why); }

// 1 while the decay thread sleeps on an empty cache (futex word): the put
// that makes the cache non-empty wakes it, so the minimum age is kept from
// the first block on, and an idle process has no timer ticking fast.
// The fences pair the put's store of the cache's size with the thread's
// store of this word (each then reads the other's): one of them sees the
// other, so the thread never sleeps through a put.
std::atomic<std::uint32_t> decay_sleeping{0};
static_assert(sizeof decay_sleeping == sizeof(std::uint32_t) && std::atomic<std::uint32_t>::is_always_lock_free);
const std::uint32_t* sleeping_word() { return reinterpret_cast<const std::uint32_t*>(&decay_sleeping); }
void wake_decay() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (decay_sleeping.load(std::memory_order_relaxed) != 0 && decay_sleeping.exchange(0) != 0)
    pal::futex_wake(sleeping_word());
}

constexpr Deps kProductionDeps{&pal::now_ns,       &pal::decommit,       &returned_to_os, &limit::cache_room,
                               &wake_decay,        &pal::drop_writable,  &pal::resident_bytes,
                               &current_tid,       &pal::resident_bytes_many};
}  // namespace

constinit ReuseCache production_cache{large::space.arena, kProductionDeps};

namespace {

bool use_thread = false;
std::atomic<bool> thread_started{false};
void (*on_thread_start)() = nullptr;
void (*live_prepare_fn)(bool) = nullptr;
pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;

// Cached blocks give way to memory the process takes from elsewhere: what
// mimalloc commits while the cache holds blocks is given back from the
// cache, oldest first (a burst of large temporaries freed, then small
// objects built: the cache does not add to that peak). Large allocations need
// no such rule: they are served from the cache itself. Only the decay thread
// runs this, at each tick; mimalloc's commit is read each time (one
// getrusage, no lock).
std::size_t small_seen = 0;
// mimalloc's committed bytes (small::committed), given by init: the unit
// tests link this file without mimalloc.
std::size_t (*small_committed_fn)() = nullptr;

std::size_t small_committed() { return small_committed_fn != nullptr ? small_committed_fn() : 0; }

// Threads' exits: mimalloc frees an exited thread's empty segments into
// its process-wide segment cache, still committed, to be decommitted once
// they have waited there its purge delay (500 ms), but only by a later
// call into mimalloc that pushes a segment or collects. A process whose
// threads finished and that now waits (a pool shut down, a batch done)
// kept them for good, as under raw mimalloc (churn-2t: 25 MiB after its
// two threads were gone; glibc 3.4). The decay thread, where there is one,
// makes that later call, once no thread has exited for the delay: a non-forced collect, which purges only expired
// entries (a process that keeps creating threads keeps reusing them, and
// each exit's own collect purges what has expired meanwhile). Then once
// more, the delay later: the collect itself frees the abandoned segments
// that frees since the exit have emptied (the main thread freeing what
// its workers made, after the join), into the segment cache with a fresh
// delay (review).
std::atomic<std::uint64_t> last_exit_ns{0};  // the latest exit's time (only grows)
void (*small_collect_fn)() = nullptr;
std::uint64_t small_collect_after = 0;
// The decay thread's own: last_exit_ns as it last saw it, when the next
// collect is due (0: none), and how many more follow that one.
std::uint64_t exit_seen_ns = 0, collect_due_ns = 0;
unsigned collects_after = 0;
// The same for a live thread's trim that emptied segments (small::trim_own):
// the latest such trim's time (only grows), and the decay thread's view.
std::atomic<std::uint64_t> last_emptied_ns{0};
std::uint64_t emptied_seen_ns = 0;

// Threads that did real work (handed out kExitStartBytes or more) leave
// pages behind that no thread may ever come back for. Once no thread has
// exited for exit_quiet_ns after such an exit, the decay thread has
// mimalloc give back everything it keeps (small_release_fn, a forced
// collect: the abandoned segments' free pages decommitted, the empty ones
// freed, the segment cache purged whole), rather than waiting for the
// purge delay above: churn-2t held 25 MiB 0.2 s after its workers ended,
// glibc 3. The while is sized by demand, as the large cache's keep age: a
// thread that starts within a second of such a release (a pool that came
// back, and faulted its pages in again) doubles it, up to 800 ms; a
// release no thread followed within a second halves it, down to 100 ms.
// The non-forced collects above still follow (segments emptied later).
std::atomic<std::uint64_t> last_big_exit_ns{0};  // only grows
void (*small_release_fn)() = nullptr;
std::uint64_t (*last_start_fn)() = nullptr;
constexpr std::uint64_t kQuietMinNs = 100'000'000, kQuietMaxNs = 800'000'000, kComeBackNs = 1'000'000'000;
// The decay thread's own.
std::uint64_t exit_quiet_ns = kQuietMinNs, big_seen_ns = 0, released_at_ns = 0;
bool release_pending = false;

// How long until the release after working threads' exits is due: 0 now,
// UINT64_MAX none pending.
std::uint64_t exits_release_in(std::uint64_t now) {
  if (small_release_fn == nullptr) return UINT64_MAX;
  if (const std::uint64_t big = last_big_exit_ns.load(std::memory_order_relaxed); big != big_seen_ns) {
    big_seen_ns = big;
    release_pending = true;
  }
  if (!release_pending) return UINT64_MAX;
  const std::uint64_t due = last_exit_ns.load(std::memory_order_relaxed) + exit_quiet_ns;
  return now >= due ? 0 : due - now;
}

void release_after_exits(std::uint64_t now) {
  if (exits_release_in(now) != 0) return;
  if (released_at_ns != 0) {
    const std::uint64_t started = last_start_fn != nullptr ? last_start_fn() : 0;
    if (started > released_at_ns && started - released_at_ns < kComeBackNs) {
      exit_quiet_ns = exit_quiet_ns * 2 < kQuietMaxNs ? exit_quiet_ns * 2 : kQuietMaxNs;
    } else if (now - released_at_ns >= kComeBackNs) {
      exit_quiet_ns = exit_quiet_ns / 2 > kQuietMinNs ? exit_quiet_ns / 2 : kQuietMinNs;
    }
  }
  limit::collect_guarded(small_release_fn);
  released_at_ns = now;
  release_pending = false;
}

// How long until a collect is due: 0 now, UINT64_MAX none pending.
std::uint64_t exits_collect_in(std::uint64_t now) {
  if (small_collect_fn == nullptr) return UINT64_MAX;
  if (const std::uint64_t last = last_exit_ns.load(std::memory_order_relaxed); last != exit_seen_ns) {
    exit_seen_ns = last;
    collect_due_ns = last + small_collect_after;
    collects_after = 1;
  }
  if (const std::uint64_t last = last_emptied_ns.load(std::memory_order_relaxed); last != emptied_seen_ns) {
    emptied_seen_ns = last;
    const std::uint64_t due = last + small_collect_after;
    if (collect_due_ns == 0 || due < collect_due_ns) collect_due_ns = due;
  }
  if (collect_due_ns == 0) return UINT64_MAX;
  return now >= collect_due_ns ? 0 : collect_due_ns - now;
}

void collect_after_exits(std::uint64_t now) {
  if (exits_collect_in(now) != 0) return;
  limit::collect_guarded(small_collect_fn);
  collect_due_ns = collects_after != 0 ? now + small_collect_after : 0;
  if (collects_after != 0) --collects_after;
}

void trim_for_demand() {
  const std::size_t small = small_committed();
  if (small > small_seen) {
    const std::size_t held = production_cache.cached_bytes();
    const std::size_t grown = small - small_seen;
    if (held != 0) production_cache.trim(grown < held ? grown : held, Reason::demand);
  }
  small_seen = small;
}

void* decay_main(void*) {
  pthread_setname_np(pthread_self(), "lowtide-decay");
  orphan::own_thread_started();
  constexpr std::uint64_t kSecond = 1'000'000'000;
  // When the cache was last seen holding something. The thread goes on
  // ticking for a decay period after it empties before it sleeps on the
  // futex: a loop that frees a block and takes it back at once empties and
  // refills the cache every iteration, and waking a sleeping thread from
  // each of those frees cost the loop a futex syscall and a context switch
  // per iteration (8 MiB numpy temporaries: 1.20x the fastest peer's
  // time, docs/benchmarks.md). A process that stops using large blocks
  // still has a quiet thread one period (at most a second) later.
  std::uint64_t held_at = pal::now_ns();
  // mimalloc's commit so far is no one's: without this baseline the first
  // tick with blocks cached took all of it (from 0) from the cache.
  small_seen = small_committed();
  const std::uint64_t linger_ns = production_cache.decay_ns() < kSecond ? production_cache.decay_ns() : kSecond;
  // When RLIMIT_DATA was last read here. A limit set on the process from
  // outside (prlimit --pid, another process's prlimit(pid, ...)) reaches
  // no lowtide code: only this re-read sees it, and until it does, commits
  // over the range stay MAP_FIXED mmaps the kernel does not check against
  // it (reliability.md nos. 109 and 118). Here rather than on the commit
  // path: a getrlimit is ~1.2 us, and one per commit cost seed-4t before
  // (docs/benchmarks.md). At most every 250 ms (a 5 ms tick would read it
  // 200 times a second for nothing), so a limit is seen within that while
  // blocks are cached and within 1.25 s otherwise (the idle tick, at most
  // 1 s, after one that came too soon to read).
  // note_data_limit is one relaxed store of a flag each commit reads once
  // (no lock, no allocation): a commit that read the old value is one made
  // before the limit was seen, as the program's own setrlimit allows too.
  // (start_thread has just read it: the first re-read is a period on.)
  constexpr std::uint64_t kDataLimitEvery = 250'000'000;
  std::uint64_t data_limit_read_at = pal::now_ns();
  for (;;) {
    const std::size_t held = production_cache.cached_bytes();
    const std::uint64_t now = pal::now_ns();
    if (now - data_limit_read_at >= kDataLimitEvery) {
      pal::note_data_limit();
      data_limit_read_at = now;
    }
    if (held != 0) held_at = now;
    if (held != 0 || now - held_at < linger_ns) {
      // Half the minimum age, at least 1 ms, at most 1 s: a block past its
      // keep age goes back within half that age again (with the default
      // 50 ms, a burst of frees nobody reuses is gone ~75 ms later).
      // While the cache holds more than kFastHeld, at most kDemandTick, so
      // what mimalloc commits meanwhile is taken from the cache within
      // 5 ms: a burst of temporaries freed, then small objects built at
      // ~700 MiB/s, had the cache add 9-28 MiB to that peak with 25 ms
      // ticks, 0-6 MiB with 5 ms (docs/benchmarks.md). Not below that
      // size: a tick costs ~55 us of CPU on this VM (the wake-up, mostly),
      // 1-1.5 % of a CPU at 5 ms against 0.25 % at 25 ms, which a few MiB
      // held do not justify.
      constexpr std::uint64_t kDemandTick = 5'000'000;
      constexpr std::size_t kFastHeld = std::size_t{16} << 20;
      std::uint64_t period = production_cache.min_age_ns() / 2;
      if (period < 1'000'000) period = 1'000'000;
      if (period > kSecond) period = kSecond;
      if (period > kDemandTick && held > kFastHeld) period = kDemandTick;
      timespec ts{static_cast<time_t>(period / kSecond), static_cast<long>(period % kSecond)};
      nanosleep(&ts, nullptr);
    } else {
      // Nothing cached: sleep until a put wakes us, or a second, so the
      // memory limit's RSS sample and cgroup re-read (limit::tick) keep
      // their pace; less when the collect after threads' exits is due
      // sooner (at least 1 ms).
      std::uint64_t wait = exits_collect_in(now);
      if (const std::uint64_t rel = exits_release_in(now); rel < wait) wait = rel;
      if (const std::uint64_t look = orphan::check(now); look < wait) wait = look;
      if (wait > kSecond) wait = kSecond;
      if (wait < 1'000'000) wait = 1'000'000;
      decay_sleeping.store(1);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (production_cache.cached_bytes() == 0) pal::futex_wait(sleeping_word(), 1, wait);
      decay_sleeping.store(0);
      small_seen = small_committed();  // what mimalloc took while nothing was cached is no one's
    }
    limit::tick();  // the RSS sample purge's limit check reads
    release_after_exits(pal::now_ns());
    collect_after_exits(pal::now_ns());
    orphan::check(pal::now_ns());  // only lowtide's threads left: the process ends (orphan.hpp)
    if (production_cache.cached_bytes() != 0) {
      trim_for_demand();
      production_cache.purge(false);
    } else {
      small_seen = small_committed();  // as above: growth while nothing is cached is no one's
    }
  }
  return nullptr;
}

// The helper thread that returns cached blocks once the process goes quiet.
// Started at the first large allocation, or at the exit of a thread that
// handed out kExitStartBytes of small blocks (note_thread_exit; a process
// that does neither has no extra thread), with every signal blocked so it never takes the host's
// signals. Not from free(): glibc frees dlopen'ed modules' TLS blocks while
// holding its stack-cache lock, which pthread_create takes too.
//
// Its stack: 64 KiB beyond the static TLS block (pal::start_thread) is
// plenty for decay_main, which calls no library that recurses (no libdw,
// no demangler, no formatting of reports). If no thread can
// be created at all (EAGAIN from a thread limit, a seccomp filter, ...), the
// cache stops keeping blocks (its puts refused, so free returns them
// as with LOWTIDE_CACHE=0) and gives back what it holds, warns once, and a
// later large allocation tries again after a backoff (1 s, doubling up to
// 64 s) rather than at every call.
std::atomic<bool> warned_no_thread{false}, warned_filtered{false}, warned_unreadable{false};
std::atomic<std::uint64_t> retry_after_ns{0};
std::atomic<unsigned> failed_starts{0};
constexpr std::size_t kStack = std::size_t{64} << 10;
constexpr unsigned kMaxBackoffShift = 6;  // 1 s << 6 = 64 s

// Set when the decay thread was started without the live server (at a
// thread's exit): the next large allocation starts the server.
std::atomic<bool> live_deferred{false};
// Set at the first large allocation (seq_cst, as live_deferred's store and
// both loads): one that came while an exit's start was under way (it saw
// the thread started, but no deferral yet) has the exit start the server.
std::atomic<bool> large_seen{false};

// Under start_mu: the live server the exit's start deferred, unless it was
// started meanwhile, the decay thread is gone (no start succeeded), or a
// seccomp filter installed since may kill on the server's socket or clone3
// (as start_thread asks). Every signal blocked: the server inherits the mask.
void start_deferred_live_locked() {
  if (!live_deferred.exchange(false) || !thread_started.load() ||
      pal::sandbox_since_start(true, true) != pal::Sandbox::as_at_start)
    return;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  on_thread_start();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void start_thread(bool with_live) {
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
  // A seccomp filter the program installed since start may kill on the
  // clone3 a thread needs or the socket the live server needs
  // (pal::sandbox_since_start): neither is tried, as if no thread could
  // be created. Read under start_mu, which fork's prepare handler takes
  // once it has shut the file gate (forks_held): a fork begun meanwhile
  // waits here, and the read, given no window, would take the status for
  // unreadable (the cache turned off, a warning of a /proc that cannot be
  // read).
  const pal::Sandbox sandbox = pal::sandbox_since_start(with_live, true);
  // At a thread's exit (with_live false) only that thread's state is known:
  // a filter it installed on itself alone says nothing of the others, so
  // the start is left to a later exit or large allocation, nothing recorded.
  if (!with_live && sandbox != pal::Sandbox::as_at_start) {
    thread_started.store(false);
    pthread_mutex_unlock(&start_mu);
    return;
  }
  // RLIMIT_DATA again, here once per start (~1.2 us): at the first large
  // allocation this comes before its commit, so a limit set from outside
  // since start-up already checks that one; the thread re-reads it from
  // then on (decay_main). Only where the thread will be tried: a filter
  // installed since start is not offered a system call it may kill on.
  if (sandbox == pal::Sandbox::as_at_start) pal::note_data_limit();
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  // The live server's socket, made now where no other thread shares the fd
  // table yet (its growth is free then: live::prepare).
  if (with_live && sandbox == pal::Sandbox::as_at_start && live_prepare_fn != nullptr) live_prepare_fn(true);
  const int rc = sandbox != pal::Sandbox::as_at_start ? EPERM : pal::start_thread(&decay_main, nullptr, kStack);
  if (rc != 0 && live_prepare_fn != nullptr) live_prepare_fn(false);
  // The live-query server (src/live.cpp) is started here, with the decay
  // thread and under the same rules: at a large allocation, outside every
  // lock, every signal blocked (the new thread inherits the mask), only in
  // a process that now has a lowtide thread anyway. Here rather than from
  // the decay thread: the thread's TLS that glibc allocates for it counts on
  // the allocating thread, which already has a counter slot (the decay
  // thread never allocates and has none).
  if (rc == 0 && on_thread_start != nullptr) {
    if (with_live) on_thread_start();
    else {
      live_deferred.store(true);
      if (large_seen.load()) start_deferred_live_locked();
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_mutex_unlock(&start_mu);
  if (rc == 0) {
    production_cache.refuse_puts(false);
    return;
  }
  unsigned fails = failed_starts.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t backoff = std::uint64_t{1'000'000'000} << (fails < kMaxBackoffShift ? fails : kMaxBackoffShift);
  // A filter is never taken away: no retry, ever.
  retry_after_ns.store(sandbox == pal::Sandbox::filtered ? UINT64_MAX : pal::now_ns() + backoff,
                       std::memory_order_relaxed);
  production_cache.refuse_puts(true);
  thread_started.store(false);
  production_cache.purge(true);
  if (sandbox == pal::Sandbox::filtered) {
    if (!warned_filtered.exchange(true, std::memory_order_relaxed))
      log::warn("a seccomp filter was installed since start: the lowtide-decay thread and the live server are "
                "not started, lest the filter kill the process; freed large blocks are returned to the OS at free");
  } else if (sandbox == pal::Sandbox::unreadable) {
    if (!warned_unreadable.exchange(true, std::memory_order_relaxed))
      log::warn("/proc/thread-self/status cannot be read as it could at start (a chroot without /proc, a "
                "sandbox, no fd left): the lowtide-decay thread and the live server are not started, lest a "
                "seccomp filter kill the process; freed large blocks are returned to the OS at free until they "
                "start (retried at large allocations, at most every 64 s)");
  } else if (!warned_no_thread.exchange(true, std::memory_order_relaxed)) {
    const char* name = strerrorname_np(rc);  // no allocation, unlike strerror
    log::warn("could not start the lowtide-decay thread (pthread_create: {}); freed large blocks are "
              "returned to the OS at free until it starts (retried at large allocations, at most every 64 s)",
              name != nullptr ? name : "error");
  }
}

}  // namespace

void account_returned(std::size_t bytes, Reason why) {
  large::space.mapped.fetch_sub(bytes, std::memory_order_relaxed);
  stats::Slot* st = stats::slot();
  switch (why) {
    case Reason::decay: stats::add(st, stats::large_released_decay, bytes); break;
    case Reason::demand: stats::add(st, stats::large_released_demand, bytes); break;
    case Reason::limit: stats::add(st, stats::large_released_limit, bytes); break;
    case Reason::room: stats::add(st, stats::large_released_room, bytes); break;
  }
}

void init(const Hooks& h) {
  live_prepare_fn = h.live_prepare;
  small_release_fn = h.small_release;
  last_start_fn = h.last_start;
  small_committed_fn = h.small_committed;
  on_thread_start = h.thread_start;
  small_collect_fn = h.small_collect;
  small_collect_after = h.small_collect_after_ns;
  const std::uint64_t cap = g.config.get(Opt::cache);
  production_cache.configure(cap == kSizeWord ? auto_cap(pal::ram_bytes()) : cap,
                             g.config.get(Opt::decay_ms) * 1'000'000u,
                             g.config.get(Opt::decay_min_ms) * 1'000'000u);
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
std::size_t cap() { return production_cache.cap(); }
std::size_t cached_peak() { return production_cache.peak_bytes(); }
std::uint64_t cached_byte_seconds() { return production_cache.byte_seconds(pal::now_ns()); }
int view(ReuseCache::View* out) { return production_cache.view(out); }

void note_large_allocation() {
  // Outside every lock: keeps the memory limit's RSS estimate fresh when the
  // decay thread is off (frees need none: they only make it smaller).
  limit::maybe_sample();
  if (!large_seen.load(std::memory_order_relaxed)) large_seen.store(true);
  if (production_cache.cap() != 0 && !thread_started.load(std::memory_order_relaxed)) {
    // Inside an allocation that succeeds: errno stays as the program left
    // it. Starting the threads sets it on paths that still succeed (the live
    // server's bind of a name another process holds leaves EADDRINUSE, its
    // stat of /proc/self/ns/pid ENOENT without /proc): kept here, once, for
    // everything the start does.
    const int saved = errno;
    start_thread(true);
    errno = saved;
  }
  // Not an else: a start that found an exit's start under way did not
  // start the server.
  if (live_deferred.load()) {
    const int saved = errno;
    pthread_mutex_lock(&start_mu);
    start_deferred_live_locked();
    pthread_mutex_unlock(&start_mu);
    errno = saved;
  }
}

namespace {
// *t = max(*t, now): a maximum, not a store, so a thread preempted between
// its clock read and its store never moves the time back past a later one.
void raise_to(std::atomic<std::uint64_t>* t, std::uint64_t now) {
  std::uint64_t old = t->load(std::memory_order_relaxed);
  while (old < now && !t->compare_exchange_weak(old, now, std::memory_order_relaxed)) {
  }
}
}  // namespace

void note_thread_exit(std::uint64_t small_out) {
  const std::uint64_t now = pal::now_ns();
  raise_to(&last_exit_ns, now);
  // The main thread gone, this may be the last thread but lowtide's: the
  // decay thread looks soon rather than at the end of a sleep of up to a
  // second (a wake per exit only in such a process).
  if (orphan::note_exit()) wake_decay();
  if (small_out < kExitStartBytes) return;
  // A thread that did real work: the release after exits (decay_main).
  raise_to(&last_big_exit_ns, now);
  if (thread_started.load(std::memory_order_relaxed)) {
    // A sleep of up to a second must not outlast the release's quiet
    // while (one wake per such exit only).
    wake_decay();
  } else if (production_cache.cap() != 0) {
    // Not from free (start_thread says why): here, on the exiting thread's
    // key destructor, no lock of glibc's is held, and the thread's counter
    // slot still takes the TLS glibc allocates for the new thread. The live
    // server waits for the next large allocation. Its listening socket is
    // moved above fd 1023, and growing the descriptor table of a process
    // with other threads waits out an RCU grace period (~7 ms here): when
    // the starting thread made the socket, the exiting thread and whoever
    // joined it paid that (churn-1t: 1.05x its time). The server now makes
    // it itself (live.cpp, open_listening); the wait is kept so that a
    // program that never makes a large allocation has no socket and no
    // second thread of lowtide's.
    const int saved = errno;
    start_thread(false);
    errno = saved;
  }
}

void note_segments_emptied() {
  raise_to(&last_emptied_ns, pal::now_ns());
  wake_decay();  // (a sleep of up to a second would outlast the purge delay)
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
  live_deferred.store(false);
  large_seen.store(false);
  orphan::fork_child();
}

}  // namespace lowtide::cache
