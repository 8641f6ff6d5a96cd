// The reuse cache alone: a ReuseCache over a test arena, with a fake clock
// and fake page operations (nothing here is ever committed: the cache only
// moves extents between itself and the arena).
#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "arena.hpp"
#include "test_arena.hpp"
#include "large_cache.hpp"
#include "platform.hpp"

using lowtide::Arena;
using lowtide::Extent;
using lowtide::cache::Deps;
using lowtide::cache::ReuseCache;

namespace {

constexpr std::size_t G = Arena::kGranule;
constexpr std::uint64_t kDecay = 1000;  // ns of the fake clock

std::uint64_t fake_now = 0;
std::size_t decommitted = 0;  // bytes the cache dropped
std::size_t returned = 0;     // bytes it reported given back
std::vector<Extent> decommits;

std::uint64_t fake_clock() { return fake_now; }
void fake_decommit(void* p, std::size_t len) {
  (void)p;
  decommitted += len;
  decommits.push_back(Extent{0, static_cast<std::uint32_t>(len / G)});
}
std::size_t returned_by[4] = {};  // ... by Reason
void fake_returned(std::size_t bytes, lowtide::cache::Reason why) {
  returned += bytes;
  returned_by[static_cast<int>(why)] += bytes;
}

constexpr Deps kFakeDeps{&fake_clock, &fake_decommit, &fake_returned};

// A fresh cache over the test arena, the fakes reset; at the end of the case
// everything must be back in the arena, as one free extent, consistent.
struct Rig {
  Arena& a = test_arena();
  std::uint32_t total = static_cast<std::uint32_t>(a.size() / G);
  ReuseCache c;
  std::vector<Extent> live;  // extents the test holds (the "program's")
  explicit Rig(std::size_t cap, std::uint64_t decay = kDecay, const Deps& deps = kFakeDeps) : c{a, deps} {
    REQUIRE(a.free_granules() == total);
    c.configure(cap, decay);
    fake_now = 0;
    decommitted = returned = 0;
    for (auto& r : returned_by) r = 0;
    decommits.clear();
  }
  ~Rig() {
    c.purge(true);
    for (Extent e : live) a.release(e.start, e.n);
    CHECK(a.check() == nullptr);
    CHECK(a.free_granules() == total);
  }
  // A used extent of n granules; `gap` more granules after it stay used by
  // the program, so extents put one after another never touch.
  Extent used(std::uint32_t n, std::uint32_t gap = 1) {
    std::uint32_t s = a.alloc(n + gap, 1);
    REQUIRE(s != Arena::kNone);
    if (gap == 0) return Extent{s, n};
    a.split(s, n + gap, n);
    live.push_back(Extent{s + n, gap});
    return Extent{s, n};
  }
  bool put(Extent e) { return c.put(e.start, e.n); }
  // The program's block at `start` grown in place (take_at) from `from` to
  // `to` granules.
  void grow_live(std::uint32_t start, std::uint32_t from, std::uint32_t to) {
    a.join(start, from, to);
    for (Extent& e : live)
      if (e.start == start) e.n = to;
  }
};

}  // namespace

TEST_CASE("cache: LOWTIDE_CACHE=auto is a sixteenth of RAM, at most 256 MiB, 256 MiB when RAM is unknown") {
  constexpr std::uint64_t MiB = 1 << 20, GiB = MiB << 10;
  CHECK(lowtide::cache::auto_cap(0) == 256 * MiB);
  CHECK(lowtide::cache::auto_cap(1 * GiB) == 64 * MiB);
  CHECK(lowtide::cache::auto_cap(2 * GiB) == 128 * MiB);
  CHECK(lowtide::cache::auto_cap(3 * GiB) == 192 * MiB);
  CHECK(lowtide::cache::auto_cap(4 * GiB) == 256 * MiB);
  CHECK(lowtide::cache::auto_cap(24 * GiB) == 256 * MiB);
  CHECK(lowtide::cache::auto_cap(std::uint64_t{1} << 50) == 256 * MiB);
}

TEST_CASE("cache: an entry goes back to the arena once the decay period has passed") {
  Rig r(64 * G);
  Extent e = r.used(4);
  REQUIRE(r.put(e));
  CHECK(r.c.cached_bytes() == e.bytes());
  CHECK(r.c.check() == nullptr);
  fake_now = kDecay - 1;
  CHECK(r.c.purge(false) == 0);
  CHECK(r.c.cached_bytes() == e.bytes());
  fake_now = kDecay;
  CHECK(r.c.purge(false) == e.bytes());
  CHECK(r.c.cached_bytes() == 0);
  CHECK(decommitted == e.bytes());
  CHECK(returned == e.bytes());
  CHECK(!r.a.is_used_extent(e.start, e.n));
  CHECK(r.a.check() == nullptr);
}

TEST_CASE("cache: while it is being drawn from, entries live up to kBusyAgeFactor periods") {
  Rig r(64 * G);
  Extent a = r.used(8);
  REQUIRE(r.put(a));
  Extent singles[4];
  for (Extent& e : singles) {
    e = r.used(1);
    REQUIRE(r.put(e));
  }
  // A take every 0.9 periods keeps the cache busy: a outlives its period.
  std::uint32_t got = 0;
  for (int i = 0; i < 4; ++i) {
    fake_now = kDecay * 9 / 10 * static_cast<std::uint64_t>(i + 1);
    CHECK(r.c.purge(false) == 0);
    std::uint32_t s = r.c.take(1, 1, 0, false, &got);  // a single: the smallest that fits
    CHECK(s != a.start);
    REQUIRE(s != lowtide::Arena::kNone);
    r.live.push_back(Extent{s, 1});
  }
  fake_now = kDecay * ReuseCache::kBusyAgeFactor - 1;
  CHECK(r.c.purge(false) == 0);
  // Busy or not, kBusyAgeFactor periods is the most.
  fake_now = kDecay * ReuseCache::kBusyAgeFactor;
  CHECK(r.c.purge(false) == a.bytes());
  CHECK(r.c.cached_bytes() == 0);
}

TEST_CASE("cache: once nobody takes, the busy extension ends a period after the last take") {
  Rig r(64 * G);
  Extent a = r.used(4), b = r.used(2);
  REQUIRE(r.put(a));
  REQUIRE(r.put(b));
  fake_now = kDecay / 2;
  std::uint32_t got = 0;
  CHECK(r.c.take(2, 1, 0, false, &got) == b.start);  // the smallest that fits
  CHECK(got == 2);
  r.live.push_back(b);
  fake_now = kDecay / 2 + kDecay - 1;  // a is past its period, the take recent
  CHECK(r.c.purge(false) == 0);
  fake_now = kDecay / 2 + kDecay;
  CHECK(r.c.purge(false) == a.bytes());
  CHECK(r.c.cached_bytes() == 0);
}

TEST_CASE("cache: the byte cap returns the oldest bytes first, and refuses a block above it") {
  Rig r(5 * G);
  Extent a = r.used(3), b = r.used(3), big = r.used(6);
  CHECK(!r.put(big));  // alone past the cap: the caller returns it
  r.live.push_back(big);
  REQUIRE(r.put(a));
  fake_now = 10;
  REQUIRE(r.put(b));
  // 6 granules over a cap of 5: a's front granule goes back.
  CHECK(r.c.cached_bytes() == 5 * G);
  CHECK(returned == G);
  CHECK(!r.a.is_used_extent(a.start, 1));
  CHECK(r.a.is_used_extent(a.start + 1, 2));
  CHECK(r.a.is_used_extent(b.start, 3));
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: at most kSlots entries; a put into a full cache returns the oldest") {
  Rig r(std::size_t{64} << 20);
  std::vector<Extent> es;
  for (int i = 0; i <= ReuseCache::kSlots; ++i) {
    es.push_back(r.used(1));
    fake_now = static_cast<std::uint64_t>(i);
    REQUIRE(r.put(es.back()));
  }
  CHECK(r.c.entries() == ReuseCache::kSlots);
  CHECK(r.c.cached_bytes() == ReuseCache::kSlots * G);
  CHECK(returned == G);
  CHECK(!r.a.is_used_extent(es[0].start, 1));  // the oldest, back in the arena
  CHECK(r.a.is_used_extent(es[1].start, 1));
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: touching entries are joined into one extent") {
  Rig r(64 * G);
  Extent whole = r.used(9);
  r.a.split(whole.start, 9, 2);
  r.a.split(whole.start + 2, 7, 3);  // [2][3][4]
  REQUIRE(r.c.put(whole.start, 2));
  REQUIRE(r.c.put(whole.start + 5, 4));
  CHECK(r.c.entries() == 2);
  REQUIRE(r.c.put(whole.start + 2, 3));  // the middle joins both
  CHECK(r.c.entries() == 1);
  CHECK(r.a.is_used_extent(whole.start, 9));
  CHECK(r.c.cached_bytes() == 9 * G);
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: take cuts the front and the rest keeps its age; evict_for trims oldest first") {
  Rig r(64 * G);
  Extent x = r.used(8), y = r.used(2);
  REQUIRE(r.put(x));  // at 0
  fake_now = 50;
  REQUIRE(r.put(y));  // at 50
  fake_now = 60;
  std::uint32_t got = 0;
  CHECK(r.c.take(3, 1, 0, false, &got) == x.start);  // y is too small
  CHECK(got == 3);
  r.live.push_back(Extent{x.start, 3});
  CHECK(r.a.is_used_extent(x.start, 3));
  CHECK(r.a.is_used_extent(x.start + 3, 5));
  CHECK(r.c.cached_bytes() == 7 * G);
  CHECK(r.c.check() == nullptr);
  // Within the slack nothing goes.
  r.c.evict_for(ReuseCache::kMissSlack - 7 * G);
  CHECK(returned == 0);
  // One granule over: the front of x's rest, the oldest (it kept age 0;
  // re-aged at the take, y would be older).
  r.c.evict_for(ReuseCache::kMissSlack - 7 * G + 1);
  CHECK(returned == G);
  CHECK(!r.a.is_used_extent(x.start + 3, 1));
  CHECK(r.a.is_used_extent(x.start + 4, 4));
  CHECK(r.a.is_used_extent(y.start, 2));
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: a take for growth gets up to 4x, take_at grows a block into the entry behind it") {
  Rig r(64 * G);
  Extent x = r.used(16);
  REQUIRE(r.put(x));
  std::uint32_t got = 0;
  CHECK(r.c.take(2, 1, 0, true, &got) == x.start);
  CHECK(got == 8);
  CHECK(!r.c.take_at(x.start + 8, 9));  // longer than the entry
  CHECK(r.c.take_at(x.start + 8, 3));
  r.a.join(x.start, 8, 11);
  r.live.push_back(Extent{x.start, 11});
  CHECK(r.c.cached_bytes() == 5 * G);
  CHECK(r.a.is_used_extent(x.start + 11, 5));
  CHECK(r.c.check() == nullptr);
}

namespace {
std::uint32_t fake_self = 0;
std::uint32_t fake_who() { return fake_self; }
constexpr Deps kSelfDeps{&fake_clock, &fake_decommit, &fake_returned, nullptr, nullptr, nullptr, nullptr, &fake_who};

// A rig whose cache knows who asks (Deps::self): x (16 granules) and y (24)
// cached, then thread 1's growing block cut from x's front (8 granules), so
// x's rest (8) is kept for thread 1. The test decides what becomes of the
// block (live, or freed).
struct OwnedRig : Rig {
  Extent x, y;
  OwnedRig() : Rig(256 * G, kDecay, kSelfDeps) {
    x = used(16);
    y = used(24);
    REQUIRE(put(x));
    REQUIRE(put(y));
    fake_self = 1;
    std::uint32_t got = 0;
    REQUIRE(c.take(2, 1, 0, true, &got) == x.start);
    REQUIRE(got == 8);
  }
  ~OwnedRig() { fake_self = 0; }
};
}  // namespace

// The rest of an extent cut for one thread's block is that block's room to
// grow: another thread takes another extent that fits, even a larger one,
// and where none does, the back of the rest (seed-4t's threads otherwise
// blocked each other's growth: docs/benchmarks.md "Threads growing buffers").
TEST_CASE("cache: the rest behind a thread's block is kept for it; others take elsewhere, or its back") {
  OwnedRig r;
  const Extent x = r.x, y = r.y;
  r.live.push_back(Extent{x.start, 8});
  std::uint32_t got = 0;
  fake_self = 2;
  CHECK(r.c.take(2, 1, 0, false, &got) == y.start);  // not x's rest, the best fit
  r.live.push_back(Extent{y.start, 2});
  fake_self = 3;
  // Only rests kept for others are left: the back of the best fit (x's
  // rest, 8 granules); its front stays behind thread 1's block.
  CHECK(r.c.take(4, 1, 0, false, &got) == x.start + 12);
  CHECK(got == 4);
  r.live.push_back(Extent{x.start + 12, 4});
  CHECK(r.c.check() == nullptr);
  fake_self = 1;
  CHECK(r.c.take_at(x.start + 8, 4));  // thread 1's block still grows in place
  r.grow_live(x.start, 8, 12);
  // A thread takes its own rest like any other extent.
  fake_self = 2;
  CHECK(r.c.take(20, 1, 0, false, &got) == y.start + 2);
  r.live.push_back(Extent{y.start + 2, 20});
  CHECK(r.c.cached_bytes() == 2 * G);
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: a block freed in front of its rest joins it, and the whole is nobody's") {
  OwnedRig r;
  const Extent x = r.x;
  REQUIRE(r.c.put(x.start, 8));  // freed: joins its rest
  CHECK(r.c.entries() == 2);
  std::uint32_t got = 0;
  fake_self = 2;
  CHECK(r.c.take(2, 1, 0, false, &got) == x.start);  // the best fit again
  r.live.push_back(Extent{x.start, 2});
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: a miss tops up from another thread's rest only when nothing else is large enough") {
  Rig r(256 * G, kDecay, kSelfDeps);
  Extent x = r.used(40), y = r.used(18);
  REQUIRE(r.put(x));
  REQUIRE(r.put(y));
  std::uint32_t got = 0, n = 0;
  std::uint64_t freed = 0;
  fake_self = 1;
  REQUIRE(r.c.take(20, 1, 0, false, &got, 40) == x.start);  // x's rest: 20, thread 1's
  r.live.push_back(Extent{x.start, 20});
  fake_self = 2;
  CHECK(r.c.largest_below(64, 16, &n, &freed) == y.start);  // smaller, but not the rest
  CHECK(n == 18);
  CHECK(r.c.largest_below(64, 19, &n, &freed) == x.start + 20);  // only the rest is that large
  std::uint32_t got_y = 0;
  REQUIRE(r.c.take(18, 1, 0, false, &got_y) == y.start);
  r.live.push_back(Extent{y.start, 18});
  CHECK(r.c.largest_below(64, 16, &n, &freed) == x.start + 20);  // nothing else left
  fake_self = 1;
  CHECK(r.c.largest_below(64, 16, &n, &freed) == x.start + 20);
  CHECK(r.c.check() == nullptr);
  fake_self = 0;
}

TEST_CASE("cache: a miss's top-up ranks other threads' rests last, in any order of the entries") {
  OwnedRig r;  // x's rest (8) is thread 1's
  r.live.push_back(Extent{r.x.start, 8});
  Extent z = r.used(40);
  REQUIRE(r.put(z));
  std::uint32_t got = 0, n = 0;
  std::uint64_t freed = 0;
  fake_self = 3;
  REQUIRE(r.c.take(10, 1, 0, false, &got, 40) == z.start);  // z's rest: 30, thread 3's, after y
  r.live.push_back(Extent{z.start, 10});
  fake_self = 2;
  CHECK(r.c.largest_below(64, 8, &n, &freed) == r.y.start);  // y (24), not z's longer rest
  CHECK(n == 24);
  CHECK(r.c.check() == nullptr);
}

// A miss's warm trial takes a cached extent whole and, when nothing comes
// of it, puts it back (LargePath::commit_warm) with the owner take_at
// found: a rest kept for a thread stays kept for it (the block in front of
// it is live, so no join could give the owner back).
TEST_CASE("cache: a rest back from another thread's failed trial is still kept for its thread") {
  OwnedRig r;  // x's rest (8 granules, at x + 8) is thread 1's; y (24) nobody's
  const Extent x = r.x;
  r.live.push_back(Extent{x.start, 8});
  std::uint32_t got = 0, n = 0, owner = 0;
  std::uint64_t freed = 0;
  fake_self = 2;
  REQUIRE(r.c.take(24, 1, 0, false, &got) == r.y.start);
  r.live.push_back(Extent{r.y.start, 24});
  REQUIRE(r.c.largest_below(64, 2, &n, &freed) == x.start + 8);
  CHECK(n == 8);
  REQUIRE(r.c.take_at(x.start + 8, n, false, &owner));
  CHECK(owner == 1);
  REQUIRE(r.c.put(x.start + 8, n, freed != 0 ? freed : 1, owner));
  r.c.end_trial(n);
  // Still thread 1's: thread 2 cuts its need off the back, not the front.
  CHECK(r.c.take(2, 1, 0, false, &got) == x.start + 14);
  r.live.push_back(Extent{x.start + 14, 2});
  fake_self = 1;
  CHECK(r.c.take_at(x.start + 8, 6));  // thread 1's block still grows in place
  r.grow_live(x.start, 8, 14);
  CHECK(r.c.check() == nullptr);
}

// What a trial hands back joins its cached neighbours: one behind it (the
// rest of an entry the trial took only the front of) keeps the owner put
// is given; one in front (the owner's block, freed meanwhile) gives its own.
TEST_CASE("cache: a trial's extent put back joins: behind it put's owner stays, in front the front's wins") {
  std::uint32_t got = 0, owner = 0;
  SECTION("behind") {
    OwnedRig r;
    const Extent x = r.x;
    r.live.push_back(Extent{x.start, 8});
    fake_self = 2;
    REQUIRE(r.c.take(24, 1, 0, false, &got) == r.y.start);  // y out of the way
    r.live.push_back(Extent{r.y.start, 24});
    // The trial takes the front half of thread 1's rest; the back half stays
    // cached (kept for the trial's thread, as take_at cuts).
    REQUIRE(r.c.take_at(x.start + 8, 4, false, &owner));
    CHECK(owner == 1);
    REQUIRE(r.c.put(x.start + 8, 4, 1, owner));
    r.c.end_trial(4);
    CHECK(r.c.entries() == 1);
    // Thread 1's again, whole: thread 2 cuts from the back, not its "own" front.
    CHECK(r.c.take(2, 1, 0, false, &got) == x.start + 14);
    r.live.push_back(Extent{x.start + 14, 2});
    CHECK(r.c.check() == nullptr);
  }
  SECTION("in front") {
    OwnedRig r;
    const Extent x = r.x;
    fake_self = 2;
    REQUIRE(r.c.take_at(x.start + 8, 8, false, &owner));
    CHECK(owner == 1);
    REQUIRE(r.c.put(x.start, 8));  // thread 1's block freed during the trial
    REQUIRE(r.c.put(x.start + 8, 8, 1, owner));
    r.c.end_trial(8);
    // Joined with the freed block in front: nobody's, so the best fit's front.
    CHECK(r.c.take(2, 1, 0, false, &got) == x.start);
    r.live.push_back(Extent{x.start, 2});
    CHECK(r.c.check() == nullptr);
  }
  fake_self = 0;
}

TEST_CASE("cache: a growth take from the back of another thread's rest gets its need only") {
  Rig r(256 * G, kDecay, kSelfDeps);
  Extent x = r.used(64);
  REQUIRE(r.put(x));
  std::uint32_t got = 0;
  fake_self = 1;
  REQUIRE(r.c.take(8, 1, 0, true, &got) == x.start);
  REQUIRE(got == 32);
  r.live.push_back(Extent{x.start, 32});
  fake_self = 2;
  CHECK(r.c.take(4, 1, 0, true, &got) == x.start + 60);  // 4, not 16
  CHECK(got == 4);
  r.live.push_back(Extent{x.start + 60, 4});
  CHECK(r.c.cached_bytes() == 28 * G);
  fake_self = 1;
  CHECK(r.c.take_at(x.start + 32, 28));
  r.grow_live(x.start, 32, 60);
  CHECK(r.c.check() == nullptr);
  fake_self = 0;
}

TEST_CASE("cache: in a fork child no rest is kept for anyone") {
  OwnedRig r;
  const Extent x = r.x;
  r.live.push_back(Extent{x.start, 8});
  r.c.reset_after_fork();
  std::uint32_t got = 0;
  fake_self = 2;  // the child's thread
  CHECK(r.c.take(2, 1, 0, false, &got) == x.start + 8);  // the best fit, x's rest
  r.live.push_back(Extent{x.start + 8, 2});
  CHECK(r.c.check() == nullptr);
}

// A block taken and freed again and again draws nothing from the cache:
// a miss after such a loop trims to the slack as before.
TEST_CASE("cache: a block reused in a loop does not count as drawn: a miss trims to the slack") {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  Rig r(std::size_t{256} << 20);
  Extent a = r.used(320), b = r.used(320), hot = r.used(16);  // 20, 20 and 1 MiB
  REQUIRE(r.put(a));
  REQUIRE(r.put(b));
  REQUIRE(r.put(hot));
  std::uint32_t got = 0;
  for (int i = 0; i < 100; ++i) {
    fake_now = 10 + static_cast<std::uint64_t>(i);
    REQUIRE(r.c.take(16, 1, 0, false, &got) == hot.start);
    REQUIRE(r.put(hot));
  }
  r.c.evict_for(4 * MiB);
  CHECK(r.c.cached_bytes() == ReuseCache::kMissSlack - 4 * MiB);
  CHECK(r.c.check() == nullptr);
}

// A block starting to grow (or moving as it grows) looks first for an
// extent as long as blocks grown lately became, and failing that takes the
// largest that fits, not the smallest it would soon outgrow.
TEST_CASE("cache: prefer picks an extent that long, else the largest; without it the smallest") {
  Rig r(256 * G);
  Extent a = r.used(10), b = r.used(40), c = r.used(60);
  REQUIRE(r.put(a));
  REQUIRE(r.put(b));
  REQUIRE(r.put(c));
  std::uint32_t got = 0;
  CHECK(r.c.take(2, 1, 0, true, &got, 30) == b.start);
  CHECK(got == 8);
  r.live.push_back(Extent{b.start, 8});
  CHECK(r.c.take(2, 1, 0, true, &got, 70) == c.start);
  r.live.push_back(Extent{c.start, 8});
  CHECK(r.c.take(2, 1, 0, true, &got) == a.start);
  r.live.push_back(Extent{a.start, 8});
  CHECK(r.c.check() == nullptr);
}

// A miss keeps what the process drew from the cache in the last one or two
// decay periods, less the fault (RSS flat across the miss); with nothing
// drawn it trims to the slack, as before.
TEST_CASE("cache: a miss keeps what was drawn lately less the fault, else the slack less the fault") {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  Rig r(std::size_t{256} << 20);
  Extent a = r.used(320), b = r.used(320), c = r.used(160);  // 20, 20 and 10 MiB
  REQUIRE(r.put(a));
  REQUIRE(r.put(b));
  REQUIRE(r.put(c));
  fake_now = 10;
  std::uint32_t got = 0;
  REQUIRE(r.c.take(160, 1, 0, false, &got) == c.start);
  r.live.push_back(c);
  REQUIRE(r.c.cached_bytes() == 40 * MiB);
  r.c.evict_for(MiB);
  CHECK(r.c.cached_bytes() == 9 * MiB);
  // Two decay periods without a take: the slack.
  fake_now = 10 + 2 * kDecay;
  r.c.evict_for(MiB);
  CHECK(r.c.cached_bytes() == ReuseCache::kMissSlack - MiB);
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: an aligned take skips entries not aligned as asked") {
  Rig r(std::size_t{64} << 20);
  // 32-granule alignment (2 MiB): an extent starting one granule past such
  // a boundary fits only with skew 1.
  std::uint32_t s = r.a.alloc(33, 32);
  REQUIRE(s != Arena::kNone);
  r.a.split(s, 33, 1);
  r.live.push_back(Extent{s, 1});
  REQUIRE(r.c.put(s + 1, 32));
  std::uint32_t got = 0;
  CHECK(r.c.take(4, 32, 0, false, &got) == Arena::kNone);
  CHECK(r.c.take(4, 32, 31, false, &got) == s + 1);
  r.live.push_back(Extent{s + 1, 4});
}

TEST_CASE("cache: refused puts, and check() reports an entry that is not the arena's extent") {
  Rig r(64 * G);
  Extent x = r.used(4);
  r.c.refuse_puts(true);
  CHECK(!r.put(x));
  r.c.refuse_puts(false);
  REQUIRE(r.put(x));
  CHECK(r.c.check() == nullptr);
  r.a.split(x.start, 4, 1);  // behind the cache's back
  const char* why = r.c.check();
  REQUIRE(why != nullptr);
  CHECK(std::string(why).find("not one used extent") != std::string::npos);
  r.a.join(x.start, 1, 4);
  CHECK(r.c.check() == nullptr);
}

// The memory limit's room (src/mem_limit.hpp): a fake that leaves room for
// `fake_room` bytes whatever the cache holds.
namespace {
std::size_t fake_room = SIZE_MAX;
std::size_t room_of(std::size_t) { return fake_room; }
constexpr Deps kRoomDeps{&fake_clock, &fake_decommit, &fake_returned, &room_of};
}  // namespace

TEST_CASE("cache: under a memory limit, puts keep only what the limit leaves room for") {
  Rig r(64 * G, kDecay, kRoomDeps);
  fake_room = 0;  // at or over the limit: nothing is kept
  Extent refused = r.used(4);
  CHECK_FALSE(r.put(refused));
  r.live.push_back(refused);  // the caller gives a refused block back itself
  CHECK(r.c.cached_bytes() == 0);
  fake_room = 6 * G;  // near it: room for 6 granules
  CHECK(r.put(r.used(4)));
  CHECK(r.c.cached_bytes() == 4 * G);
  fake_now = 1;
  CHECK(r.put(r.used(4)));  // 8 > 6: the oldest gives way, oldest first
  CHECK(r.c.cached_bytes() <= 6 * G);
  CHECK(r.c.cached_bytes() >= 4 * G);
  CHECK(decommitted == 8 * G - r.c.cached_bytes());
  CHECK(r.c.check() == nullptr);
  fake_room = 8 * G;  // a block larger than the room alone is refused
  Extent big = r.used(16);
  CHECK_FALSE(r.put(big));
  r.live.push_back(big);
  fake_room = SIZE_MAX;
}

TEST_CASE("cache: when the process grows towards its limit, purge trims what is cached, young or not") {
  Rig r(64 * G, kDecay, kRoomDeps);
  fake_room = SIZE_MAX;
  CHECK(r.put(r.used(4)));
  CHECK(r.put(r.used(4)));
  CHECK(r.c.purge(false) == 0);  // young, and room enough
  fake_room = 4 * G;
  CHECK(r.c.purge(false) == 4 * G);
  CHECK(r.c.cached_bytes() == 4 * G);
  fake_room = 0;
  CHECK(r.c.purge(false) == 4 * G);
  CHECK(r.c.cached_bytes() == 0);
  CHECK(returned == 8 * G);
  CHECK(r.c.check() == nullptr);
  fake_room = SIZE_MAX;
}

// ---- demand-sized keeping (configure's minimum age) ----

TEST_CASE("cache: with a minimum age, a block nobody reuses goes back after it, counted as demand") {
  constexpr std::uint64_t kMin = kDecay / 10;
  Rig r(64 * G);
  r.c.configure(64 * G, kDecay, kMin);
  CHECK(r.c.keep_age(0) == kMin);
  Extent e = r.used(4);
  REQUIRE(r.put(e));
  fake_now = kMin - 1;
  CHECK(r.c.purge(false) == 0);
  fake_now = kMin;
  CHECK(r.c.purge(false) == e.bytes());
  CHECK(returned_by[static_cast<int>(lowtide::cache::Reason::demand)] == e.bytes());
  CHECK(returned_by[static_cast<int>(lowtide::cache::Reason::decay)] == 0);
}

TEST_CASE("cache: a reuse at age A keeps blocks reuse_keep(A), for two decay periods at most") {
  constexpr std::uint64_t kMin = kDecay / 10;
  constexpr std::uint64_t kAge = kDecay / 5;  // older than the minimum age
  Rig r(64 * G);
  r.c.configure(64 * G, kDecay * 100, kMin);  // a long decay period: only the reuse rule acts
  // A block reused at kAge (kept that long because the cache was younger
  // than the minimum age at every purge: purge is not called here).
  Extent a = r.used(2), b = r.used(2);
  REQUIRE(r.put(a));
  fake_now = kAge;
  std::uint32_t got = 0;
  REQUIRE(r.c.take(2, 1, 0, false, &got) == a.start);
  r.live.push_back(a);
  CHECK(r.c.keep_age(fake_now) == ReuseCache::reuse_keep(kAge));
  // b, freed at kAge, stays until it is twice that old.
  REQUIRE(r.put(b));
  fake_now = kAge + ReuseCache::reuse_keep(kAge) - 1;
  CHECK(r.c.purge(false) == 0);
  fake_now = kAge + ReuseCache::reuse_keep(kAge);
  CHECK(r.c.purge(false) == b.bytes());
  CHECK(returned_by[static_cast<int>(lowtide::cache::Reason::demand)] == b.bytes());
  // Two decay periods without a reuse: back to the minimum age.
  fake_now = kAge + 2 * kDecay * 100;
  CHECK(r.c.keep_age(fake_now) == kMin);
}

namespace {
// `times` requests for 2 granules, every `step` after `from`, none served
// (the cache holds nothing that size): the process asking at that pace.
// fake_now ends at the last one.
void ask_without_hits(Rig& r, std::uint64_t from, std::uint64_t step, int times) {
  std::uint32_t got = 0;
  for (int i = 1; i <= times; ++i) {
    fake_now = from + static_cast<std::uint64_t>(i) * step;
    CHECK(r.c.take(2, 1, 0, false, &got) == lowtide::Arena::kNone);
  }
}
}  // namespace

TEST_CASE("cache: once the process stops asking for blocks, what it frees goes back at the minimum age") {
  constexpr std::uint64_t kMin = kDecay / 10;
  Rig r(64 * G);
  r.c.configure(64 * G, kDecay * 100, kMin);  // a long decay period: only the reuse rules act
  // A batch reused slowly: a block taken at age 3 * kMin (keep 4.5 * kMin),
  // while the process asks for a block every kMin / 10 (the misses count).
  Extent a = r.used(2), b = r.used(2);
  REQUIRE(r.put(a));
  std::uint32_t got = 0;
  fake_now = 3 * kMin;
  REQUIRE(r.c.take(2, 1, 0, false, &got) == a.start);
  r.live.push_back(a);
  ask_without_hits(r, 3 * kMin, kMin / 10, 10);
  const std::uint64_t last = fake_now;
  CHECK(r.c.keep_age(last) == ReuseCache::reuse_keep(3 * kMin));
  // The last batch is freed and nothing asks again: kept the minimum age
  // after the last request, not 4.5 * kMin.
  REQUIRE(r.put(b));
  fake_now = last + kMin - 1;
  CHECK(r.c.keep_age(fake_now) == ReuseCache::reuse_keep(3 * kMin));
  CHECK(r.c.purge(false) == 0);
  fake_now = last + kMin;
  CHECK(r.c.keep_age(fake_now) == kMin);
  CHECK(r.c.purge(false) == b.bytes());
  CHECK(returned_by[static_cast<int>(lowtide::cache::Reason::demand)] == b.bytes());
  // Asking again ends it.
  CHECK(r.c.take(2, 1, 0, false, &got) == lowtide::Arena::kNone);
  CHECK(r.c.keep_age(fake_now) == ReuseCache::reuse_keep(3 * kMin));
}

TEST_CASE("cache: a process that asks every T is idle only reuse_keep(T) after its last request") {
  constexpr std::uint64_t kMin = kDecay / 10;
  constexpr std::uint64_t kT = 5 * kMin / 2;  // requests farther apart than the minimum age
  Rig r(64 * G);
  r.c.configure(64 * G, kDecay * 100, kMin);
  Extent a = r.used(2);
  REQUIRE(r.put(a));
  std::uint32_t got = 0;
  fake_now = kT;  // reused at kT: kept reuse_keep(kT)
  REQUIRE(r.c.take(2, 1, 0, false, &got) == a.start);
  r.live.push_back(a);
  // One request alone says nothing of the process's pace: no idle rule.
  CHECK(r.c.keep_age(kT + 10 * kMin) == ReuseCache::reuse_keep(kT));
  fake_now = 2 * kT;
  CHECK(r.c.take(2, 1, 0, false, &got) == lowtide::Arena::kNone);
  CHECK(r.c.keep_age(2 * kT + ReuseCache::reuse_keep(kT) - 1) == ReuseCache::reuse_keep(kT));
  CHECK(r.c.keep_age(2 * kT + ReuseCache::reuse_keep(kT)) == kMin);
}

TEST_CASE("cache: a request long before a batch does not turn the idle rule off") {
  constexpr std::uint64_t kMin = kDecay / 10;
  Rig r(64 * G);
  r.c.configure(64 * G, kDecay, kMin);  // the usual decay period: the buckets rotate
  std::uint32_t got = 0;
  fake_now = 10;  // one large allocation at start-up
  CHECK(r.c.take(2, 1, 0, false, &got) == lowtide::Arena::kNone);
  // Twenty periods later, a batch as in the case above.
  const std::uint64_t base = 20 * kDecay;
  Extent a = r.used(2), b = r.used(2);
  fake_now = base;
  REQUIRE(r.put(a));
  fake_now = base + 3 * kMin;
  REQUIRE(r.c.take(2, 1, 0, false, &got) == a.start);
  r.live.push_back(a);
  ask_without_hits(r, base + 3 * kMin, kMin / 10, 10);
  const std::uint64_t last = fake_now;
  REQUIRE(r.put(b));
  // The start-up pause (twenty periods) is no pace: idle kMin after the last request.
  CHECK(r.c.keep_age(last + kMin - 1) == ReuseCache::reuse_keep(3 * kMin));
  CHECK(r.c.keep_age(last + kMin) == kMin);
}

TEST_CASE("cache: a block grown into the cache (take_at) is a request: the process is not idle") {
  constexpr std::uint64_t kMin = kDecay / 10;
  Rig r(64 * G);
  r.c.configure(64 * G, kDecay, kMin);
  Extent e = r.used(20);
  REQUIRE(r.put(e));  // at 0
  std::uint32_t got = 0;
  fake_now = 1;
  REQUIRE(r.c.take(2, 1, 0, false, &got) == e.start);  // a block cut from its front
  fake_now = 2;
  REQUIRE(r.c.take(2, 1, 0, false, &got) == e.start + 2);  // and another: a gap of 1
  r.live.push_back(Extent{e.start, 4});
  // Then only reallocs growing into the rest, every kMin / 2, until 4 * kMin.
  std::uint32_t at = e.start + 4;
  for (int i = 1; i <= 8; ++i) {
    fake_now = static_cast<std::uint64_t>(i) * (kMin / 2);
    REQUIRE(r.c.take_at(at, 1));
    r.live.push_back(Extent{at, 1});
    ++at;
  }
  const std::uint64_t last = fake_now;  // 4 * kMin: a reuse at that age
  CHECK(r.c.keep_age(last + kMin - 1) == ReuseCache::reuse_keep(4 * kMin));
  CHECK(r.c.keep_age(last + kMin) == kMin);
}

TEST_CASE("cache: a miss that a block given back early would have served teaches the keep age") {
  constexpr std::uint64_t kMin = kDecay / 10;
  Rig r(64 * G);
  r.c.configure(64 * G, kDecay, kMin);
  Extent e = r.used(4);
  REQUIRE(r.put(e));
  fake_now = kMin;
  REQUIRE(r.c.purge(false) == e.bytes());  // early: remembered as a ghost
  // The program asks for a block that size at 3 * kMin: it would have been
  // served at that age.
  fake_now = 3 * kMin;
  r.c.evict_for(e.bytes());
  CHECK(r.c.keep_age(fake_now) == ReuseCache::reuse_keep(3 * kMin));
}

TEST_CASE("cache: a miss larger than every ghost, or after the decay period, teaches nothing") {
  constexpr std::uint64_t kMin = kDecay / 10;
  Rig r(64 * G);
  r.c.configure(64 * G, kDecay, kMin);
  Extent e = r.used(4);
  REQUIRE(r.put(e));
  fake_now = kMin;
  REQUIRE(r.c.purge(false) == e.bytes());
  fake_now = 2 * kMin;
  r.c.evict_for(e.bytes() + G);
  CHECK(r.c.keep_age(fake_now) == kMin);
  fake_now = kDecay + 1;  // the ghost is older than the decay period
  r.c.evict_for(e.bytes());
  CHECK(r.c.keep_age(fake_now) == kMin);
}

TEST_CASE("cache: the keep age never passes the decay period, and the reasons add up") {
  constexpr std::uint64_t kMin = kDecay / 10;
  Rig r(4 * G);
  r.c.configure(4 * G, kDecay, kMin);
  Extent a = r.used(2), b = r.used(2), c = r.used(2);
  REQUIRE(r.put(a));
  fake_now = kDecay * 3;  // a reuse at 3 periods' age: kept at most a period
  std::uint32_t got = 0;
  REQUIRE(r.c.take(2, 1, 0, false, &got) == a.start);
  r.live.push_back(a);
  // Busy (a take within the period): kBusyAgeFactor periods at most.
  CHECK(r.c.keep_age(fake_now) == kDecay * ReuseCache::kBusyAgeFactor);
  REQUIRE(r.put(b));
  REQUIRE(r.put(c));
  fake_now += 1;
  Extent d = r.used(2);
  REQUIRE(r.put(d));  // over the 4-granule cap: b, the oldest, goes (room)
  CHECK(returned_by[static_cast<int>(lowtide::cache::Reason::room)] == b.bytes());
  CHECK(r.c.peak_bytes() == 4 * G);
  fake_now += kDecay * ReuseCache::kBusyAgeFactor;
  CHECK(r.c.purge(false) == c.bytes() + d.bytes());
  CHECK(returned_by[static_cast<int>(lowtide::cache::Reason::decay)] == c.bytes() + d.bytes());
  std::size_t sum = 0;
  for (std::size_t v : returned_by) sum += v;
  CHECK(sum == returned);
}

TEST_CASE("cache: byte_seconds integrates what the cache held over time") {
  Rig r(64 * G);
  Extent e = r.used(4);
  fake_now = 1'000'000'000;  // 1 s
  REQUIRE(r.put(e));
  CHECK(r.c.byte_seconds(fake_now) == 0);
  fake_now += 3'000'000'000;  // held 3 s
  CHECK(r.c.byte_seconds(fake_now) == 3 * e.bytes());
  r.c.purge(true);
  fake_now += 5'000'000'000;  // nothing held since
  CHECK(r.c.byte_seconds(fake_now) == 3 * e.bytes());
}

// A change accounts time up to the `now` its thread read before the lock;
// a reading made meanwhile (a report, at a later `now`) counted the old
// level further. Once the change lowered the level from its earlier time
// on, the sum read next was below the one read before: a counter going
// down (no. 105).
TEST_CASE("cache: byte_seconds never goes down when a change's time is older than a reading's") {
  Rig r(64 * G);
  Extent e = r.used(4);
  fake_now = 1'000'000'000;  // 1 s
  REQUIRE(r.put(e));
  const std::uint64_t read = r.c.byte_seconds(10'000'000'000);  // a report at 10 s: held 9 s
  CHECK(read == 9 * e.bytes());
  fake_now = 5'000'000'000;  // a purge whose thread read the time at 5 s, then waited for the lock
  r.c.purge(true);
  CHECK(r.c.cached_bytes() == 0);
  CHECK(r.c.byte_seconds(11'000'000'000) >= read);  // 4 s of it before
  fake_now = 20'000'000'000;
  CHECK(r.c.byte_seconds(20'000'000'000) >= read);
}

TEST_CASE("cache: trimming within an entry's last granule takes it whole, never leaves an empty entry") {
  Rig r(64 * G);
  Extent a = r.used(4), b = r.used(4);
  REQUIRE(r.put(a));
  fake_now = 1;
  REQUIRE(r.put(b));
  // One byte short of a: the granules needed are all of a's.
  CHECK(r.c.trim(a.bytes() - 1, lowtide::cache::Reason::demand) == a.bytes());
  CHECK(r.c.entries() == 1);
  CHECK(r.c.check() == nullptr);
  // Part of b: its front goes, the rest stays, not empty.
  CHECK(r.c.trim(G + 1, lowtide::cache::Reason::demand) == 2 * G);
  CHECK(r.c.cached_bytes() == 2 * G);
  CHECK(r.c.check() == nullptr);
  CHECK(returned_by[static_cast<int>(lowtide::cache::Reason::demand)] == a.bytes() + 2 * G);
}

namespace {
// Deps::resident's fake: every granule has this many bytes resident.
std::size_t fake_res_per_granule = G;
int resident_calls = 0;
std::size_t fake_resident(const void* p, std::size_t len) {
  (void)p;
  ++resident_calls;
  return len / G * fake_res_per_granule;
}
constexpr Deps kResidentDeps{&fake_clock, &fake_decommit, &fake_returned, nullptr, nullptr, nullptr, &fake_resident};
}  // namespace

TEST_CASE("cache: a miss counts cached blocks by their resident bytes, the fault by the process's resident fraction") {
  Rig r(512 * G, kDecay, kResidentDeps);
  resident_calls = 0;
  fake_res_per_granule = G / 64;  // one page in 64 written (bench/many_large)
  Extent a = r.used(160), b = r.used(160), c = r.used(160);  // 10 MiB each: 30 past the 8 MiB slack
  REQUIRE(r.put(a));
  REQUIRE(r.put(b));
  REQUIRE(r.put(c));
  // 3 x 160 KiB resident, and the 10 MiB fault to come costs 160 KiB at the
  // fraction just measured: all kept, each measured once.
  r.c.evict_for(a.bytes());
  CHECK(returned == 0);
  CHECK(resident_calls == 3);
  r.c.evict_for(a.bytes());
  CHECK(returned == 0);
  CHECK(resident_calls == 3);
  CHECK(r.c.cached_bytes() == 480 * G);
  // A block written in full is freed: measured at the next miss, it makes
  // the fraction whole, and a 10 MiB fault is past the slack by itself:
  // everything goes.
  fake_res_per_granule = G;
  Extent d = r.used(16);
  REQUIRE(r.put(d));
  r.c.evict_for(a.bytes());
  CHECK(resident_calls == 4);
  CHECK(returned == 496 * G);
  CHECK(r.c.cached_bytes() == 0);
  CHECK(r.c.check() == nullptr);
}

namespace {
// Deps::resident_many's fake: the ranges of each call, counted (the same
// bytes as fake_resident).
int many_calls = 0, many_ranges = 0;
void fake_resident_many(const lowtide::pal::Span* spans, int n, std::size_t* out) {
  ++many_calls;
  many_ranges += n;
  for (int i = 0; i < n; ++i) out[i] = spans[i].len / G * fake_res_per_granule;
}
constexpr Deps kManyDeps{&fake_clock, &fake_decommit, &fake_returned, nullptr,
                         nullptr,     nullptr,        &fake_resident, nullptr,
                         &fake_resident_many};
}  // namespace

// Where Deps::resident_many is given, a miss measures every entry freed
// since the last one in one call (one pagemap descriptor for all), in
// batches of at most pal::kSpansMax, and never range by range.
TEST_CASE("cache: a miss measures the entries not yet measured in one batch") {
  Rig r(2048 * G, kDecay, kManyDeps);
  resident_calls = many_calls = many_ranges = 0;
  fake_res_per_granule = G / 64;
  std::vector<Extent> held;
  for (int i = 0; i < 3; ++i) held.push_back(r.used(160));
  for (const Extent& e : held) REQUIRE(r.put(e));
  r.c.evict_for(held[0].bytes());
  CHECK(returned == 0);  // as above: sparse, all kept
  CHECK(many_calls == 1);
  CHECK(many_ranges == 3);
  CHECK(resident_calls == 0);
  // Measured once: the next miss asks nothing.
  r.c.evict_for(held[0].bytes());
  CHECK(many_calls == 1);
  // More than a batch freed at once: two calls, each entry once.
  const int more = lowtide::pal::kSpansMax + 5;
  std::vector<Extent> small;
  for (int i = 0; i < more; ++i) small.push_back(r.used(4));
  for (const Extent& e : small) REQUIRE(r.put(e));
  r.c.evict_for(held[0].bytes());
  CHECK(many_calls == 3);
  CHECK(many_ranges == 3 + more);
  CHECK(resident_calls == 0);
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: with no block measured for two decay periods a fault counts whole") {
  Rig r(512 * G, kDecay, kResidentDeps);
  fake_res_per_granule = G / 64;
  Extent a = r.used(160), b = r.used(160);
  REQUIRE(r.put(a));
  REQUIRE(r.put(b));
  r.c.evict_for(a.bytes());
  CHECK(returned == 0);
  // The entries are still cached (purge is not called), measured long ago:
  // the fraction is forgotten, the fault counts its 10 MiB, past the slack.
  fake_now = 2 * kDecay;
  r.c.evict_for(a.bytes());
  CHECK(returned == 320 * G);
}

namespace {
// Entries shorter than kFracLeast: 512 KiB ones resident throughout (short
// blocks written in full), others a third (the rests cuts leave, a few
// stray pages); longer ones one page in 64.
std::size_t rest_resident(const void* p, std::size_t len) {
  (void)p;
  if (len >= ReuseCache::kFracLeast) return len / 64;
  return len == 8 * G ? len : len / 3;
}
constexpr Deps kRestDeps{&fake_clock, &fake_decommit, &fake_returned, nullptr, nullptr, nullptr, &rest_resident};
}  // namespace

TEST_CASE("cache: a short sparse entry teaches the resident fraction as if it were a MiB long") {
  Rig r(512 * G, kDecay, kRestDeps);
  Extent a = r.used(160), b = r.used(160), rest = r.used(2);  // 10 MiB sparse twice, a 128 KiB rest
  REQUIRE(r.put(a));
  REQUIRE(r.put(b));
  REQUIRE(r.put(rest));
  // The rest, a third resident, teaches 43 KiB of a MiB (4 %): a 25 MiB
  // fault costs 1 MiB, and the entries (363 KiB resident) stay. (Taught
  // its own third, the fault would cost 8.3 MiB, past the slack alone:
  // everything would go.)
  r.c.evict_for(std::size_t{25} << 20);
  CHECK(returned == 0);
  CHECK(r.c.cached_bytes() == 322 * G);
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: short blocks written in full teach their own fraction") {
  Rig r(512 * G, kDecay, kRestDeps);
  std::vector<Extent> small;
  for (int i = 0; i < 4; ++i) {
    fake_now = 10 + static_cast<std::uint64_t>(i);  // oldest first
    small.push_back(r.used(8));  // 512 KiB each, resident throughout
    REQUIRE(r.put(small.back()));
  }
  // Fraction whole (review: taught as half a MiB each, the 14 MiB fault
  // would count 7 and keep two of them): the fault alone is past the
  // slack, everything goes.
  r.c.evict_for(std::size_t{14} << 20);
  CHECK(returned == 32 * G);
  CHECK(r.c.cached_bytes() == 0);
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: a measured dense entry is cut at its front by the excess, as an unmeasured one") {
  Rig r(64 * G, kDecay, kResidentDeps);
  fake_res_per_granule = G;
  Extent x = r.used(8), y = r.used(2);
  REQUIRE(r.put(x));
  fake_now = 50;
  REQUIRE(r.put(y));
  fake_now = 60;
  std::uint32_t got = 0;
  CHECK(r.c.take(3, 1, 0, false, &got) == x.start);
  r.live.push_back(Extent{x.start, 3});
  r.c.evict_for(ReuseCache::kMissSlack - 7 * G);
  CHECK(returned == 0);
  r.c.evict_for(ReuseCache::kMissSlack - 7 * G + 1);
  CHECK(returned == G);
  CHECK(r.a.is_used_extent(x.start + 4, 4));
  CHECK(r.a.is_used_extent(y.start, 2));
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: a hit on a measured sparse entry is a fault: blocks cached since are judged against it") {
  Rig r(1024 * G, kDecay, kResidentDeps);
  fake_res_per_granule = G / 64;
  Extent a = r.used(320);  // 20 MiB written in one page of 64
  REQUIRE(r.put(a));
  r.c.evict_for(a.bytes());  // a miss measures it: sparse, kept
  REQUIRE(r.c.cached_bytes() == a.bytes());
  // Blocks written in full are freed (not measured yet), then a 15 MiB
  // request takes a's front: up to 15 MiB of it may fault, which the
  // blocks now measured dense make a 15 MiB fault, past the slack alone:
  // everything cached goes (the dense blocks and a's rest).
  fake_res_per_granule = G;
  std::vector<Extent> dense;
  for (int i = 0; i < 8; ++i) {
    dense.push_back(r.used(8));
    REQUIRE(r.put(dense.back()));
  }
  std::uint32_t got = 0;
  CHECK(r.c.take(240, 1, 0, false, &got) == a.start);
  r.live.push_back(Extent{a.start, 240});
  CHECK(returned == 64 * G + 80 * G);
  CHECK(r.c.cached_bytes() == 0);
  CHECK(r.c.check() == nullptr);
}

TEST_CASE("cache: hits on sparse entries of a process whose blocks are all sparse keep the rest") {
  Rig r(1024 * G, kDecay, kResidentDeps);
  fake_res_per_granule = G / 64;
  Extent a = r.used(320), b = r.used(240), c = r.used(160);
  REQUIRE(r.put(a));
  REQUIRE(r.put(b));
  REQUIRE(r.put(c));
  r.c.evict_for(a.bytes());
  REQUIRE(r.c.cached_bytes() == 720 * G);
  std::uint32_t got = 0;
  CHECK(r.c.take(200, 1, 0, false, &got) == b.start);  // the smallest that fits
  r.live.push_back(Extent{b.start, 200});
  CHECK(returned == 0);
  CHECK(r.c.cached_bytes() == 520 * G);
  CHECK(r.c.check() == nullptr);
}

namespace {
// A mincore during which other threads act: a take of the block being
// measured, written in full and freed at the same place; then a
// commit_warm trial takes it (take_at) and puts it back with the age it
// read before the first take (review).
ReuseCache* race_cache = nullptr;
std::uint32_t race_start = 0, race_n = 0;
bool race_dense = false, race_armed = false;
std::size_t racing_resident(const void* p, std::size_t len) {
  (void)p;
  const std::size_t seen = race_dense ? len : len / 64;
  if (race_armed) {
    race_armed = false;
    std::uint32_t got = 0;
    REQUIRE(race_cache->take(race_n, 1, 0, false, &got) == race_start);
    race_dense = true;
    fake_now = 20;
    REQUIRE(race_cache->put(race_start, race_n));
    REQUIRE(race_cache->take_at(race_start, race_n, false));
    REQUIRE(race_cache->put(race_start, race_n, 10));
    race_cache->end_trial(race_n);
  }
  return seen;
}
constexpr Deps kRacingDeps{&fake_clock, &fake_decommit, &fake_returned, nullptr, nullptr, nullptr, &racing_resident};
}  // namespace

TEST_CASE("cache: a measure is stored only on the entry it was taken of") {
  Rig r(512 * G, kDecay, kRacingDeps);
  race_cache = &r.c;
  race_dense = false;
  fake_now = 10;
  Extent a = r.used(160);  // 10 MiB
  REQUIRE(r.put(a));
  race_start = a.start;
  race_n = a.n;
  race_armed = true;
  // A 1 MiB miss measures a as it was (sparse) while it is rewritten: the
  // entry there now (written in full) is not measured, nor the fraction
  // learnt from it, so it counts its length and the fault its own: the cache
  // keeps the slack less the fault (the stale measure would keep 10 MiB;
  // the race's take and free draw nothing from the cache in all).
  r.c.evict_for(std::size_t{1} << 20);
  CHECK(r.c.cached_bytes() == ReuseCache::kMissSlack - (std::size_t{1} << 20));
  CHECK(r.c.check() == nullptr);
}

// A signal handler that forks while its thread is inside a give-back (found
// by the review of the large path): the child's copy of the thread finishes
// the give-back once the handler returns. Here the child's handler
// (Arena::reset_after_fork and ReuseCache::reset_after_fork, as
// after_fork_child runs them) is called from inside the give-back's page
// operation, where such a fork comes. When the give-back is over every
// count must be 0 again: before the fix the child's counts started from 0
// and went below it (in_flight wrapped), and wait_give_backs (mlockall's)
// spun for ever. That wait runs on a thread of its own, watched for 5 s.
namespace {
Arena* forking_arena = nullptr;
ReuseCache* forking_cache = nullptr;
int forks_left = 0;
bool forking_drop(void*, std::size_t) {
  if (forks_left > 0) {
    --forks_left;
    forking_arena->reset_after_fork();
    forking_cache->reset_after_fork();
  }
  return false;  // refused: decommit, as pal::drop_writable's fallback
}
}  // namespace

TEST_CASE("cache: a fork inside a give-back on the forking thread leaves every count at 0 when it ends") {
  Deps deps = kFakeDeps;
  deps.drop_writable = &forking_drop;
  Rig r(64 * G, kDecay, deps);
  const Extent x = r.used(4), y = r.used(6);
  REQUIRE(r.put(x));
  REQUIRE(r.put(y));
  forking_arena = &r.a;
  forking_cache = &r.c;
  forks_left = 1;
  r.c.purge(true);  // both given back, the fork inside the first
  CHECK(forks_left == 0);
  CHECK(r.c.cached_bytes() == 0);
  CHECK(r.c.in_flight() == 0);
  CHECK(r.a.hiding() == 0);
  // No run held out, none counted unlisted: the whole range does not fit.
  CHECK_FALSE(r.a.may_fit_once_settled(r.total, 1, 0, 0));
  std::atomic<bool> waited{false};
  std::thread t([&] {
    r.a.wait_give_backs();
    waited.store(true);
  });
  for (int i = 0; i < 500 && !waited.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(waited.load());
  // Outside any give-back this thread's share is 0: a reset now puts every
  // count back at 0 (and frees the waiting thread where the test failed).
  r.a.reset_after_fork();
  r.c.reset_after_fork();
  t.join();
}
