// Policy for reusing freed large blocks: a bounded set of committed extents
// kept after free so that a loop that frees and reallocates large buffers
// does not pay a page fault per 4 KiB again, returned to the OS when the
// byte cap is reached or when they are older than the process has shown it
// reuses blocks (between the minimum age and the decay period: see
// ReuseCache::keep_age).
//
// ReuseCache is the policy alone, over an arena, a clock and page operations
// it is given (tests/unit/cache_test.cpp drives one with a fake clock). The
// process's one cache, wired to large::space.arena, CLOCK_MONOTONIC and pal::decommit,
// lives in large_cache.cpp behind the cache:: functions below, which add the
// helper thread that returns blocks once the process goes quiet.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <pthread.h>

namespace lowtide {

class Arena;

namespace pal {
struct Span;  // platform.hpp
}  // namespace pal

namespace cache {

// How long ago `then` was, seen at `now` (both CLOCK_MONOTONIC ns). purge()
// reads the clock before the times other threads store (oldest_ns,
// last_take_ns, an entry put while it waited for the lock), so `then` can
// be later than `now`: that is age 0, not a wrapped-around huge age.
inline std::uint64_t age_ns(std::uint64_t now, std::uint64_t then) { return now > then ? now - then : 0; }

// What a cache needs from outside: the time, and how to drop the pages of
// an extent it gives back (before it returns the extent to its arena).
// Why the cache gave bytes back (the report's released_* counters).
enum class Reason : unsigned char {
  decay,   // not reused for the decay period (LOWTIDE_DECAY_MS)
  demand,  // older than the process has been reusing blocks (keep_age)
  limit,   // the memory limit left no room (Deps::room)
  room,    // the cache was full (cap or slots), or a miss needed the room
};

struct Deps {
  std::uint64_t (*now_ns)();
  void (*decommit)(void* p, std::size_t len);
  // Told of every byte given back to the OS, and why (accounting); may be null.
  void (*returned)(std::size_t bytes, Reason why);
  // How many bytes the cache may hold now, given it holds `held` (the
  // memory limit: src/mem_limit.hpp); may be null (only the cap bounds it).
  // Called without the lock on put's and purge's quick checks, then again
  // under it; must not lock or allocate.
  std::size_t (*room)(std::size_t held) = nullptr;
  // Told when put keeps a block in an empty cache, outside the lock (the
  // decay thread sleeps while nothing is cached); may be null.
  void (*kept)() = nullptr;
  // Arena::give_back's read-write release (pal::drop_writable); may be null
  // (decommit alone, as the unit tests' fakes do).
  bool (*drop_writable)(void* p, std::size_t len) = nullptr;
  // Bytes of [p, p+len) that are resident (pal::resident_bytes: PAGEMAP_SCAN, mincore):
  // what a cached block really costs. May be null (every block counts its
  // whole length, as the unit tests' default fakes do).
  std::size_t (*resident)(const void* p, std::size_t len) = nullptr;
  // Who is asking (the calling thread's id, never 0): the rest of a cached
  // extent cut for one thread's block stays cached behind that block, kept
  // for its growth (ReuseCache::take). May be null: no rest is kept for
  // anyone, as before.
  std::uint32_t (*self)() = nullptr;
  // The same as `resident` for n ranges at once (n <= pal::kSpansMax; one
  // pagemap descriptor for all: pal::resident_bytes_many). May be null:
  // `resident` is asked range by range.
  void (*resident_many)(const pal::Span* spans, int n, std::size_t* out) = nullptr;
};

// The largest value recorded in this period and the one before (a period
// starts at the first record after the previous one ended), so a value is
// remembered one to two periods: the reuse cache's oldest reuse age and
// longest gap between requests. Lock-free and approximate: two threads
// recording at once may lose one value, never add one that did not happen.
class RecentMax {
 public:
  void note(std::uint64_t now, std::uint64_t value, std::uint64_t period) {
    if (age_ns(now, since_.load(std::memory_order_relaxed)) >= period) {
      before_.store(now_.load(std::memory_order_relaxed), std::memory_order_relaxed);
      now_.store(0, std::memory_order_relaxed);
      since_.store(now, std::memory_order_relaxed);
    }
    if (value > now_.load(std::memory_order_relaxed)) now_.store(value, std::memory_order_relaxed);
  }
  // 0 if nothing was recorded in the last two periods (the buckets rotate
  // only when a value is recorded).
  std::uint64_t get(std::uint64_t now, std::uint64_t period) const {
    const std::uint64_t since = age_ns(now, since_.load(std::memory_order_relaxed));
    std::uint64_t v = since < 2 * period ? now_.load(std::memory_order_relaxed) : 0;
    if (since < period) {
      const std::uint64_t before = before_.load(std::memory_order_relaxed);
      v = before > v ? before : v;
    }
    return v;
  }

 private:
  std::atomic<std::uint64_t> now_{0}, before_{0}, since_{0};
};

class ReuseCache {
 public:
  static constexpr int kSlots = 128;
  // A miss may fault fresh pages while the cache still holds this much
  // resident memory: a few blocks of a loop whose sizes vary stay warm
  // instead of being given back at every miss (see evict_for). Bounds what
  // a miss adds to what the process holds (more stays cached only while the
  // process draws that much from the cache).
  static constexpr std::size_t kMissSlack = std::size_t{8} << 20;
  // A cached entry's resident bytes not yet measured (Entry::res).
  static constexpr std::size_t kUnmeasured = SIZE_MAX;
  // Resident fractions (RecentMax) in these units, stored + 1 so that 0 is
  // "none measured".
  static constexpr std::size_t kFracOne = 1024;
  // An entry shorter than this and less than half resident teaches the
  // resident fraction as if it were this long, the rest not resident.
  // Such entries are mostly the rests that cuts leave behind blocks (a few
  // 64 KiB granules), where one stray page is 6 % of a granule: in
  // bench/many_large, whose blocks of 5-25 MiB are written one page in 64
  // (1.6 %), such rests made the largest fraction 12-19 %, so every miss
  // counted a fault of up to a fifth of its length and cut the cache to
  // half its slack. A short block at least half resident teaches its own
  // fraction (review: blocks of 128 KiB to 1 MiB written in full are
  // common, and taught as a share of a MiB they would let a miss keep
  // that much more cached than the fault leaves room for).
  static constexpr std::size_t kFracLeast = std::size_t{1} << 20;
  // While the cache is being drawn from (a take within the last decay
  // period), an entry may outlive the decay period up to this many times
  // it: a loop working through a batch of freed buffers (a second round of
  // the same job) finds them still there, and what nobody takes still goes
  // back within a few periods.
  static constexpr std::uint64_t kBusyAgeFactor = 4;
  // An entry is kept 3/2 of the oldest age at which the process has recently
  // reused a block (keep_age): a block reused at 100 ms keeps its peers
  // 150 ms, so the reuse the process shows goes on being served, with a
  // margin small enough that a batch consumed over 100 ms and then freed for
  // good is given back 150 ms later, not a decay period later.
  static constexpr std::uint64_t reuse_keep(std::uint64_t seen) { return seen + seen / 2; }
  // Blocks given back early (younger than the decay period, by keep_age) are
  // remembered, this many of the latest: a miss that one of them would have
  // served counts as a reuse at the age it would have had, so a process whose
  // reuse is slower than the minimum age soon keeps its blocks long enough.
  static constexpr int kGhosts = 32;

  constexpr ReuseCache(Arena& arena, const Deps& deps) : arena_(arena), deps_(deps) {}
  ReuseCache(const ReuseCache&) = delete;
  ReuseCache& operator=(const ReuseCache&) = delete;

  // Byte cap (0: keep nothing), decay period, and minimum age (how long a
  // block is kept while the process shows no reuse; the decay period if
  // larger, or if 0 is given: then the age is not adapted). Before first use.
  void configure(std::size_t cap, std::uint64_t decay_ns, std::uint64_t min_age_ns = 0) {
    cap_ = cap;
    decay_ns_ = decay_ns;
    min_age_ns_ = min_age_ns == 0 || min_age_ns > decay_ns ? decay_ns : min_age_ns;
  }
  std::size_t cap() const { return cap_; }
  std::uint64_t decay_ns() const { return decay_ns_; }
  std::uint64_t min_age_ns() const { return min_age_ns_; }

  // How old an entry may get at `now` before purge gives it back:
  // reuse_keep() of the oldest reuse seen in the last two decay periods
  // (takes, and misses a recently given-back block would have served), at
  // least the minimum age, at most the decay period (kBusyAgeFactor times it
  // while the cache is being drawn from). Lock-free (a view of what takes
  // recorded).
  // Unless the process has stopped asking for large blocks: no request (a
  // take, hit or miss) for longer than reuse_keep() of the longest time it
  // went between two requests in the last two decay periods, and at least
  // the minimum age, means nothing is about to take a block, and the
  // minimum age applies (a batch built, then freed for good: issue 14's 0.2 s
  // target). Fewer than two requests in that window: no such rule.
  std::uint64_t keep_age(std::uint64_t now) const;

  // Try to keep the extent [start, start+n) (still "used" in the arena, pages
  // committed) instead of returning it. false: the caller returns it now
  // (over the cap, or puts are refused). Cached extents that touch are
  // joined into one.
  // freed_ns: when it was freed, if not now (a block taken and handed back
  // unused keeps its age, so it still decays). owner: the thread it stays
  // kept for (a block handed back from a trial keeps the owner take_at
  // reported; a free's extent has none), unless it joins a cached extent in
  // front of it, whose owner the whole then has.
  bool put(std::uint32_t start, std::uint32_t n, std::uint64_t freed_ns = 0, std::uint32_t owner = 0);

  // A cached extent for a block of `need` granules whose start granule + skew
  // is aligned to align_g granules; kNone if none. The smallest cached extent
  // that fits (see prefer) is cut: its first `need` granules are handed out (4 * need for a
  // block being grown by realloc, so the growth steps that follow land in
  // place) and the rest stays cached, committed, with its age: any mix of
  // sizes reuses warm pages. *got is the length handed out.
  // The rest is kept for the thread the block was cut for (Entry::owner):
  // other threads' takes pass over it while another extent fits, and where
  // none does they cut `need` off the back of it, so that the block in front
  // still grows in place (an aligned request takes the front, as an
  // alignment is met only at an entry's start). Threads building buffers
  // at once (seed-4t) otherwise took each other's rests, blocked each
  // other's growth and moved.
  // prefer (> need): the granules the block is expected to grow to; the
  // smallest extent that long is looked for first, else the largest that
  // fits (not the smallest, which the block would soon outgrow).
  std::uint32_t take(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, bool for_growth,
                     std::uint32_t* got, std::uint32_t prefer = 0);

  // A miss (no cached extent of `need` granules): the largest cached extent
  // of at least `least` granules (and fewer than `need`), left in place: its
  // warm pages may become the front of the new block (LargePath::commit_warm
  // looks at them, then take_at()s it whole, on trial, and calls
  // note_taken() once the pages are in use or put()s it back with its age,
  // then end_trial()).
  // kNone if none; *n its length, *freed_ns when it was freed.
  std::uint32_t largest_below(std::uint32_t need, std::uint32_t least, std::uint32_t* n,
                              std::uint64_t* freed_ns) const;
  // A block freed at freed_ns, taken with take_at(..., false), was reused.
  void note_taken(std::uint64_t freed_ns);

  // The first n granules of the cached extent that starts at granule `at`, if
  // there is one that long: a block ending at `at` grows into them in place.
  // as_reuse false: on trial, not counted as a reuse yet (note_taken does),
  // and counted as coming back (settle waits for it) until end_trial(n),
  // which the caller makes once the block is cached again, given back, or
  // in use. *owner (if not null): the thread the entry was kept for (0:
  // none), for a trial's put back.
  bool take_at(std::uint32_t at, std::uint32_t n, bool as_reuse = true, std::uint32_t* owner = nullptr);
  void end_trial(std::uint32_t n);
  std::size_t in_flight() const { return in_flight_.load(std::memory_order_acquire); }  // for tests

  // Return everything that has been cached longer than the decay period (all
  // of it when `all`), and, oldest first, what the memory limit no longer
  // leaves room for (Deps::room). Returns the bytes given back.
  std::size_t purge(bool all);

  // For an allocation that found the range full even after purge(true):
  // entries another thread has taken out to give back (a decay pass takes
  // them all, then re-maps them one by one) or on trial (commit_warm) are
  // out of the cache and not yet free in the range, and any give-back
  // (Arena::give_back, the cache's or another free's, or protect_free)
  // holds the free extents next to its own out of the free lists while it
  // re-maps: for a moment the range looks full. The caller takes
  // settle_start() before its first try, and empties the cache before each
  // later one; after each failed try, settle() returns true as soon as one
  // of those has ended since the last look and the request may fit now
  // (try again: as each ends, not only once all have), and false when none
  // is under way, the request (need granules, granule + skew_g aligned to
  // align_g, as Arena::alloc) could not fit even once they are back
  // (Arena::may_fit_once_settled), or kSettleNs have passed since the first
  // call (checked between yields, so a descheduled thread may overrun it;
  // past it, one last try if one ended since the previous one). With drop_writable (production), the run a
  // give-back holds counts whole, the freed extent too: a request that fits
  // only there waits for another thread's free under way, where any
  // allocator could have failed it (racing the program's own free).
  struct Settle {
    std::uint64_t trials;  // trials ended at the last look
    std::uint64_t hidings; // the arena's give-backs (and protect_free batches) ended then
    std::uint64_t until;   // deadline (0: not started)
    bool last_try_made;    // the one try allowed past the deadline
  };
  Settle settle_start() const;
  bool settle(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, Settle* st);
  static constexpr std::uint64_t kSettleNs = 20'000'000;
  void set_settle_bound(std::uint64_t ns) { settle_ns_ = ns; }  // for tests

  // A request the cache could not serve is about to fault `bytes` fresh:
  // return, oldest first, what the cache holds beyond kMissSlack after that
  // fault, or, while the process draws on the cache (takes less puts in the
  // last one or two decay periods, `drawn`), beyond that draw less the
  // fault: either way a miss does not add to what the process holds by
  // more than the slack. request: the
  // size of the miss, matched against blocks given back early (0: already
  // matched for this miss).
  // Counted in resident bytes where Deps::resident says (entries measured
  // once each, here, outside the lock): a cached block written in one byte
  // per 256 KiB costs 1/64 of its length. The fault to come counts its
  // length times the largest resident fraction of the blocks measured in the
  // last two decay periods (all of it if none was): a process whose large
  // blocks are all sparse keeps a few of them warm through its misses
  // (bench/many_large: 1.9x tcmalloc's time before, peak +5 MiB after); one
  // that writes any block in full is judged as before. A take (or take_at)
  // from a measured entry is a fault too, of the pages the entry's bound
  // says the handed part may lack: it calls evict_for for them (review: hits
  // on sparse blocks written in full, while blocks freed later stayed
  // cached, raised the peak by 10-60 MiB).
  void evict_for(std::size_t bytes, std::size_t request);
  void evict_for(std::size_t bytes) { evict_for(bytes, bytes); }

  // Give back at least `bytes` of what is cached, oldest first, counted as
  // `why`. Returns the bytes given back.
  std::size_t trim(std::size_t bytes, Reason why);

  // While set, put() refuses everything (nothing would return it later).
  void refuse_puts(bool on) { refusing_.store(on, std::memory_order_relaxed); }

  std::size_t cached_bytes() const { return held_view_.load(std::memory_order_acquire); }  // (recompute_oldest)
  // The most it has held, and the integral of what it held over time in
  // byte-seconds (up to `now`): what keeping blocks cost in memory.
  std::size_t peak_bytes() const { return peak_view_.load(std::memory_order_relaxed); }
  std::uint64_t byte_seconds(std::uint64_t now) const;
  int entries() const;  // takes the lock

  // For the live query (src/live.cpp): the cached extents, each marked
  // `decayed` when purge(false) would return it now (the decay thread's
  // next wake-up will). Copied under the lock, which is held for no more
  // than the copy. Returns how many (at most kSlots).
  struct View {
    std::uint32_t start, n;
    bool decayed;
  };
  int view(View* out) const;

  // Its invariants (takes the lock, then the arena's): at most kSlots
  // entries holding at most the cap, their byte total is bytes held, each is
  // one used extent of the arena, no two touch. nullptr if all hold, else the
  // first one violated.
  const char* check();

  void lock() { pthread_mutex_lock(&mu_); }
  void unlock() { pthread_mutex_unlock(&mu_); }
  // Is [start, start + n) one of the cache's entries? (The child's
  // reclaim after a fork: large::fork_child_reclaim.)
  bool holds(std::uint32_t start, std::uint32_t n) {
    lock();
    bool found = false;
    for (int i = 0; i < count_ && !found; ++i) found = entries_[i].start == start && entries_[i].n == n;
    unlock();
    return found;
  }
  void reset_after_fork();  // in a forked child

 private:
  struct Entry {
    std::uint32_t start, n;
    std::uint64_t freed_ns;
    // At most this many bytes of it are resident (measured by evict_for; a
    // cut keeps the bound: cached pages are never written), or kUnmeasured.
    std::size_t res = kUnmeasured;
    // Which put made it: a measure taken outside the lock is stored only on
    // the entry it was taken of (a block taken, written and cached again
    // at the same place, with its old age, is another entry).
    std::uint32_t gen = 0;
    // The thread (Deps::self) whose block, cut from this extent's front,
    // sits right in front of it and may grow into it; 0: none known.
    std::uint32_t owner = 0;
  };
  struct Ghost {
    std::uint64_t bytes = 0, freed_ns = 0;
  };

  // What the cache may hold now, holding `held`: the cap, lowered by Deps::room.
  std::size_t allowed(std::size_t held) const;
  void recompute_oldest();
  void remove_at(int i);
  std::size_t give_back(const Entry* out, const Reason* why, int n);
  void unlock_giving(const Entry* out, int n);
  void note_reuse(std::uint64_t now, std::uint64_t age);  // under mu_
  void note_request(std::uint64_t now);                   // lock-free
  void account_time(std::uint64_t now);                   // under mu_, before bytes_held_ changes
  std::uint32_t cut(int i, std::uint32_t want, std::uint32_t who);
  std::uint32_t cut_back(int i, std::uint32_t want);
  Entry split_front(Entry& e, std::uint32_t k);
  void handed_out(Entry& e, std::uint32_t k);
  int oldest() const;
  int trim_oldest(std::size_t bytes, Entry* out, Reason* why_out, Reason why);
  static std::size_t cost_of(const Entry& e);
  static std::size_t hand_fault(const Entry& e, std::uint32_t handed);
  void measure_entries();
  // cost: what the entries cost now (the sum of cost_of), which the caller has.
  int trim_to_cost(std::size_t cost, std::size_t most, Entry* out, Reason* why_out);
  // Joins the cached extents that touch [*start, *start + *n) into it;
  // *owner becomes that of the one joined in front, if one was.
  void join_neighbours(std::uint32_t* start, std::uint32_t* n, std::uint32_t* owner);
  int best_fit(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, std::uint32_t who,
               bool largest = false) const;
  std::uint32_t self() const { return deps_.self != nullptr ? deps_.self() : 0; }

  Arena& arena_;
  const Deps& deps_;
  std::size_t cap_ = 0;
  std::uint64_t decay_ns_ = 0;
  std::uint64_t min_age_ns_ = 0;
  std::uint64_t settle_ns_ = kSettleNs;
  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  Entry entries_[kSlots] = {};
  int count_ = 0;                  // under mu_
  std::uint32_t gen_ = 0;          // under mu_: the last Entry::gen given
  std::size_t bytes_held_ = 0;     // under mu_
  std::atomic<std::size_t> held_view_{0};
  std::atomic<std::uint64_t> oldest_ns_{UINT64_MAX};
  std::atomic<std::uint64_t> last_take_ns_{0};  // when take() last served a block
  std::atomic<bool> refusing_{false};
  std::atomic<std::size_t> in_flight_{0};  // bytes taken out for give_back or on trial, not yet back
  std::atomic<std::uint64_t> trials_ended_{0};  // end_trial calls (an epoch for settle)
  // The oldest reuse age seen in the last one or two decay periods (written
  // under mu_), and the last request (take) with the longest time between
  // two requests (lock-free), read by keep_age.
  RecentMax reuse_age_;
  static constexpr std::uint64_t kNoRequest = UINT64_MAX;
  // best_fit's `who` that passes over no entry (no thread has this id).
  static constexpr std::uint32_t kAnyone = UINT32_MAX;
  std::atomic<std::uint64_t> last_request_ns_{kNoRequest};
  RecentMax request_gap_;
  // The largest resident fraction (kFracOne units, + 1) of the entries
  // measured in the last two decay periods: how much of a fresh block the
  // process is likely to write (evict_for).
  RecentMax resident_frac_;
  // Bytes take and take_at handed out less the bytes freed into the cache
  // (never below 0), in this decay period and the one before (under mu_):
  // how much of the cache the process is drawing down, not its turnover (a
  // block taken and freed again and again draws nothing). A miss keeps up
  // to that much cached (evict_for).
  struct Drawn {
    std::uint64_t since = 0;
    std::size_t now = 0, before = 0;
  } drawn_;
  void note_drawn(std::uint64_t now, std::size_t out, std::size_t in);  // under mu_
  std::size_t drawn(std::uint64_t now) const;             // under mu_
  Ghost ghosts_[kGhosts] = {};  // under mu_
  int next_ghost_ = 0;          // under mu_
  std::atomic<bool> have_ghosts_{false};
  // Accounting: the peak, and byte-nanoseconds held (as a double: 256 MiB
  // for an hour is 2.4e21, past a uint64_t) up to changed_ns_.
  std::atomic<std::size_t> peak_view_{0};
  std::atomic<double> byte_ns_{0};            // written under mu_
  std::atomic<std::uint64_t> changed_ns_{0};  // written under mu_
  // The most byte_seconds has returned: it never returns less (it is a
  // counter: Prometheus's lowtide_large_cached_byte_seconds_total).
  mutable std::atomic<std::uint64_t> seconds_seen_{0};
};

// The process's cache (large::space.arena, CLOCK_MONOTONIC, pal::decommit), wired in
// large_cache.cpp.
extern ReuseCache production_cache;
// Its Deps::returned: large::space.mapped and the returned-bytes counters.
void account_returned(std::size_t bytes, Reason why);

// The production cache's operations, as ReuseCache's above. Its puts are
// refused while the helper thread cannot be started (nothing would return
// the block later).
bool put(std::uint32_t start, std::uint32_t n);
std::uint32_t take(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, bool for_growth,
                   std::uint32_t* got);
bool take_at(std::uint32_t at, std::uint32_t n);
std::size_t purge(bool all);
void evict_for(std::size_t bytes);
std::size_t cached_bytes();
// The cache's byte cap (LOWTIDE_CACHE, its "auto" resolved).
std::size_t cap();
std::size_t cached_peak();
std::uint64_t cached_byte_seconds();
int view(ReuseCache::View* out);  // out: ReuseCache::kSlots entries

// Called on every large allocation: refreshes the memory limit's RSS sample
// when it is old, and starts the decay thread the first time.
void note_large_allocation();

// LOWTIDE_CACHE=auto, the default: a sixteenth of the machine's RAM, at
// most 256 MiB (256 MiB where the RAM is unknown), so that a small VM or a
// container without a memory limit does not keep a quarter of its memory
// in freed blocks after a drop. Not more on a large machine, though more
// would be faster for a job that frees a batch larger than the cap and
// builds the next one (its pages fault again: 11-31 us per 4 KiB on these
// VMs, ~0.5 us on bare metal with the zeroing): the cache holds all of it
// for the ~75 ms after every drop (keep_age), which is the instant the
// issue's peers are compared at, and a bigger cache added ~4 % to the
// peak (the warm backs of cached blocks that moving buffers then took
// whole; a move now cuts its block to its need).
// docs/benchmarks.md "The cache's size" has the figures for 512 MiB and
// 1 GiB; measured again at the twenty-seventh stop ("The cache's cap,
// measured again"): 512 MiB made seed-4t 1.15x -> 1.07x tcmalloc's wall
// here but held up to 512 MiB right after a drop (scripts/demo: more than
// glibc at that instant), for a gain that faults at bare-metal cost would
// all but erase. LOWTIDE_CACHE=512MiB is the setting for such a job.
constexpr std::size_t kAutoCapMost = std::size_t{256} << 20;
constexpr std::size_t auto_cap(std::uint64_t ram) {
  return ram == 0 || ram / 16 >= kAutoCapMost ? kAutoCapMost : static_cast<std::size_t>(ram / 16);
}

// At the start of every exiting thread's key destructor (stats::init's
// hook), given the small-block bytes the thread handed out in its life:
// notes the time, so that the decay thread has what mimalloc keeps of
// exited threads' pages go back once no thread has exited for a while
// (init's small_collect). A thread that handed out kExitStartBytes or more
// starts the decay thread (and the live server with it) where no large
// allocation has yet: its pages are worth a thread, and without one they
// stay resident for as long as the process runs (mimalloc 2.0.9 purges
// only inside later calls). A thread that handed out less (a pool's short
// task, thread-churn's one block) starts nothing.
constexpr std::uint64_t kExitStartBytes = std::uint64_t{4} << 20;
void note_thread_exit(std::uint64_t small_out);
// A live thread's trim emptied segments of its own (small::trim_own, on
// that thread, signals blocked, under limit's collect lock): mimalloc keeps
// them committed in its segment cache for its purge delay and purges them
// only in a later collect, which the thread that emptied them may not make
// for long (a producer that went idle, a loop served by the thread cache).
// The decay thread, where it runs, makes that collect (small_collect) once
// the delay is past, as after exits. Never waits, never allocates.
void note_segments_emptied();

// What the decay thread calls in other layers, given by init.cpp (the unit
// tests link this file without them: every one may be null).
struct Hooks {
  // mimalloc's committed bytes (small::committed_now): the demand rule of
  // the decay thread.
  std::size_t (*small_committed)() = nullptr;
  // Run each time the decay thread has been started, by the thread that
  // started it (live::start).
  void (*thread_start)() = nullptr;
  // What the decay thread runs, under limit::collect_guarded, once no
  // thread has exited for small_collect_after_ns (small::collect_expired;
  // the delay is mimalloc's purge delay for freed segments plus a margin).
  void (*small_collect)() = nullptr;
  std::uint64_t small_collect_after_ns = 0;
  // What it runs, likewise, once no thread has exited for a while (100-800
  // ms) after a thread that handed out kExitStartBytes or more exited
  // (small::release_retained: mimalloc gives back all it keeps, its
  // segment cache included).
  void (*small_release)() = nullptr;
  // When a thread last started (stats::last_thread_start_ns), which sets
  // that while.
  std::uint64_t (*last_start)() = nullptr;
  // live::prepare: called just before the decay thread is created (true:
  // the live server's socket is made then where the process has no other
  // thread) and after a start that created none (false: that socket is
  // closed).
  void (*live_prepare)(bool) = nullptr;
};
void init(const Hooks& hooks);
void fork_prepare();
void fork_parent();
void fork_child();

}  // namespace cache
}  // namespace lowtide
