// stats::read_slot: a report reads each thread's counters while the thread
// counts (a call, then its histogram bucket). A pass reads the counters, the
// histogram, then the counters again; calls counted in between leave the
// histogram off from one reading or the other, and a stalled reader (an
// interrupt, a preemption) lets thousands through. The reading kept must be
// the one closest to the histogram, not the last, and never off by more
// than the closest pass was.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <utility>

#include "state.hpp"
#include "stats.hpp"

namespace stats = lowtide::stats;

namespace {

constexpr unsigned kBucket = 7;
// What the owner counts in each pass: before the histogram is read (after the
// first reading of the counters), and after it (before the second reading).
std::pair<std::uint64_t, std::uint64_t> hook_bumps[300];
int hook_passes = 0;

void count_calls(const stats::Slot* cs, int pass, int phase) {
  auto* s = const_cast<stats::Slot*>(cs);
  if (phase == 0) ++hook_passes;
  const std::uint64_t n = pass >= 300 ? 0 : phase == 0 ? hook_bumps[pass].first : hook_bumps[pass].second;
  // As malloc counts: the call, then its bucket.
  __atomic_fetch_add(&s->c[stats::malloc_calls], n, __ATOMIC_RELAXED);
  __atomic_fetch_add(&s->hist[kBucket], n, __ATOMIC_RELAXED);
}

void set_bumps(std::initializer_list<std::pair<std::uint64_t, std::uint64_t>> bumps) {
  for (auto& b : hook_bumps) b = {0, 0};
  int i = 0;
  for (auto b : bumps) hook_bumps[i++] = b;
}

struct Hooked {
  std::unique_ptr<stats::Slot> slot{new stats::Slot{}};
  std::uint64_t c[stats::kCounters] = {};
  std::uint64_t h[stats::kHistBuckets] = {};
  explicit Hooked(std::initializer_list<std::pair<std::uint64_t, std::uint64_t>> bumps) {
    set_bumps(bumps);
    read();
  }
  void read() {
    hook_passes = 0;
    stats::read_slot_hook = count_calls;
    stats::read_slot(slot.get(), c, h);
    stats::read_slot_hook = nullptr;
  }
  // How far the histogram is ahead of the calls in what was read.
  std::int64_t ahead() const {
    return static_cast<std::int64_t>(h[kBucket]) - static_cast<std::int64_t>(c[stats::malloc_calls]);
  }
};

}  // namespace

TEST_CASE("read_slot: a quiet slot is read in one pass, exactly") {
  Hooked r({});
  CHECK(hook_passes == 1);
  CHECK(r.ahead() == 0);
}

TEST_CASE("read_slot: calls counted before the histogram is read: the second reading is kept, exact") {
  Hooked r({{10000, 0}});
  CHECK(hook_passes == 1);
  CHECK(r.ahead() == 0);
  CHECK(r.c[stats::malloc_calls] == 10000);
}

TEST_CASE("read_slot: calls counted after the histogram is read: the first reading is kept, exact") {
  Hooked r({{0, 10000}});
  CHECK(hook_passes == 1);
  CHECK(r.ahead() == 0);
  CHECK(r.c[stats::malloc_calls] == 0);
}

TEST_CASE("read_slot: calls on both sides of the histogram: it reads on until a pass is within one call") {
  // Off by min(before, after) in each pass: 4000, 2000, 500, 3, then 1.
  Hooked r({{5000, 4000}, {3000, 2000}, {1000, 500}, {3, 3}, {1, 5}});
  CHECK(hook_passes == 5);
  CHECK(r.ahead() == 1);  // the first reading: one call behind the histogram
}

TEST_CASE("read_slot: an owner that never lets a pass through: bounded, the closest kept") {
  Hooked r({});
  set_bumps({{900, 900}, {700, 800}, {50, 60}, {650, 700}});
  for (int i = 4; i < 300; ++i) hook_bumps[i] = {100, 100};
  r.read();
  CHECK(hook_passes == 256);
  CHECK(r.ahead() == 50);  // the third pass, read before its 60 later calls

  for (auto& b : hook_bumps) b = {100, 100};
  r.read();
  CHECK(hook_passes == 256);
  CHECK(r.ahead() == 100);  // a tie: the first reading
}

namespace {

struct Totals {
  std::unique_ptr<stats::ThreadRow[]> rows{new stats::ThreadRow[8]};
  stats::Snapshot snap{};
  Totals() {
    snap.rows = rows.get();
    snap.cap = 8;
    stats::snapshot(&snap, false);
  }
  std::uint64_t operator[](stats::Counter k) const { return snap.total.c[k]; }
};

}  // namespace

TEST_CASE("returned_bytes is its parts as read: a reading between a give-back's two counts still adds up") {
  // A give-back counts its bytes under one reason. Until no. 95 it also
  // bumped returned_bytes, one add before the other, so a report between
  // the two showed a whole its parts did not add up to; here the part
  // alone is counted, as a reader between the two would have seen it.
  stats::Slot* s = stats::slot();
  REQUIRE(s != nullptr);
  const Totals before;
  stats::add(s, stats::large_released_decay, 3 << 20);
  stats::add(s, stats::large_released_room, 1 << 20);
  const Totals after;
  CHECK(after[stats::large_returned_bytes] - before[stats::large_returned_bytes] == (4u << 20));
  std::uint64_t parts = 0;
  for (stats::Counter k : stats::kReturnedParts) parts += after[k];
  CHECK(after[stats::large_returned_bytes] == parts);
  // The slot itself never counts the whole.
  CHECK(__atomic_load_n(&s->c[stats::large_returned_bytes], __ATOMIC_RELAXED) == 0);
}

namespace {

std::uint64_t seen_live = 0, seen_peak = 0, seen_snap_live = 0, seen_snap_peak = 0, raw_live = 0, raw_peak = 0;

void read_between_live_and_peak() {
  raw_live = stats::large_live_now();
  raw_peak = stats::large_peak_now();
  stats::large_live_peak(&seen_live, &seen_peak);
  const Totals t;
  seen_snap_live = t.snap.large_live;
  seen_snap_peak = t.snap.large_peak;
}

}  // namespace

TEST_CASE("a reading between a new live high and its peak never shows a peak below live (no. 94)") {
  std::uint64_t live = 0, peak = 0;
  stats::large_live_peak(&live, &peak);
  // Enough to make a new peak.
  const std::size_t bytes = static_cast<std::size_t>(peak - live) + (1u << 20);
  stats::large_live_hook = read_between_live_and_peak;
  stats::large_live_add(bytes);
  stats::large_live_hook = nullptr;
  // The hook ran where the race is: the raw peak is still the old one.
  REQUIRE(raw_live == live + bytes);
  REQUIRE(raw_peak < raw_live);
  CHECK(seen_live == raw_live);
  CHECK(seen_peak >= seen_live);
  CHECK(seen_snap_live == raw_live);
  CHECK(seen_snap_peak >= seen_snap_live);
  // And once the add is done, the peak is the new high.
  stats::large_live_peak(&live, &peak);
  CHECK(peak == raw_live);
  stats::large_live_sub(bytes);
}

// A report's own helpers (libdw, the demangler) allocate on the reporting
// thread (no. 104): what they count goes to a scratch slot no reader sees,
// and only the blocks they keep (live: the totals' live bytes are the
// process's) and the bytes they gave back to the OS reach the thread's
// counters, by additions only (no counter a reader saw goes down).
TEST_CASE("begin_own/end_own: a report's helpers' calls go, the blocks they keep stay live (no. 104)") {
  std::unique_ptr<stats::Slot> owned{new stats::Slot{}};
  stats::Slot& slot = *owned;
  lowtide::ThreadLocal& t = lowtide::t_local;
  stats::Slot* const was = t.stats;
  t.stats = &slot;
  // What the program counted before the report.
  slot.c[stats::malloc_calls] = 10;
  slot.c[stats::free_calls] = 4;
  slot.c[stats::small_requested] = 1000;
  slot.c[stats::small_out] = 1200;
  slot.c[stats::small_freed] = 300;
  slot.c[stats::large_out] = 5u << 20;
  slot.c[stats::large_maps] = 5;
  slot.hist[kBucket] = 10;
  std::unique_ptr<stats::OwnScratch> own{new stats::OwnScratch{}};
  stats::begin_own(own.get());
  REQUIRE(t.stats == &own->scratch);
  REQUIRE(own->real == &slot);
  // The fast paths count through the cache: parked meanwhile (its slot is
  // no reader's), and no cache opens in the scratch slot.
  CHECK(t.cache == lowtide::kParkedCache);
  CHECK(t.cache_armed == 0);
  // The helpers, counted where they count: 100 small blocks of 64 B, 96
  // freed (4 kept); two large blocks of 1 MiB, one freed and given back;
  // a realloc.
  stats::Slot* h = stats::slot();
  REQUIRE(h == &own->scratch);
  h->c[stats::malloc_calls] += 102;
  h->c[stats::realloc_calls] += 1;
  h->c[stats::free_calls] += 97;
  h->c[stats::small_requested] += 6400;
  h->c[stats::small_out] += 6400;
  h->c[stats::small_freed] += 96 * 64;
  h->c[stats::large_requested] += 2u << 20;
  h->c[stats::large_out] += 2u << 20;
  h->c[stats::large_freed] += 1u << 20;
  h->c[stats::large_maps] += 2;
  h->c[stats::large_unmaps] += 1;
  h->c[stats::large_released_free] += 1u << 20;
  h->hist[kBucket] += 103;
  // Meanwhile a reader of the thread's slot saw none of it.
  CHECK(slot.c[stats::malloc_calls] == 10);
  CHECK(slot.c[stats::small_out] == 1200);
  stats::end_own(own.get());
  CHECK(t.stats == &slot);
  CHECK(t.cache == own->cache);
  t.stats = was;
  CHECK(slot.c[stats::malloc_calls] == 10);
  CHECK(slot.c[stats::realloc_calls] == 0);
  CHECK(slot.c[stats::free_calls] == 4);
  CHECK(slot.c[stats::small_requested] == 1000);
  CHECK(slot.hist[kBucket] == 10);
  // The 4 small blocks and the large one kept are still handed out.
  CHECK(slot.c[stats::small_freed] == 300);
  CHECK(slot.c[stats::small_out] == 1200 + 4 * 64);
  CHECK(slot.c[stats::large_requested] == 0);
  CHECK(slot.c[stats::large_freed] == 0);
  CHECK(slot.c[stats::large_out] == (5u << 20) + (1u << 20));
  CHECK(slot.c[stats::large_maps] == 6);
  CHECK(slot.c[stats::large_unmaps] == 0);
  // Given back to the OS: it was.
  CHECK(slot.c[stats::large_released_free] == (1u << 20));
}

// A block handed out before the report and freed by its helpers (a libdw
// buffer from the report before): counted as freed, by an addition.
TEST_CASE("end_own: what the helpers freed of older blocks is added as freed (no. 104)") {
  std::unique_ptr<stats::Slot> owned{new stats::Slot{}};
  stats::Slot& slot = *owned;
  lowtide::ThreadLocal& t = lowtide::t_local;
  stats::Slot* const was = t.stats;
  t.stats = &slot;
  slot.c[stats::small_out] = 5000;
  slot.c[stats::small_freed] = 1000;
  std::unique_ptr<stats::OwnScratch> own{new stats::OwnScratch{}};
  stats::begin_own(own.get());
  own->scratch.c[stats::small_out] += 100;
  own->scratch.c[stats::small_freed] += 400;
  stats::end_own(own.get());
  t.stats = was;
  CHECK(slot.c[stats::small_out] == 5000);
  CHECK(slot.c[stats::small_freed] == 1300);
}

TEST_CASE("a report's helpers' large blocks raise no peak (no. 104)") {
  std::uint64_t live = 0, peak = 0;
  stats::large_live_peak(&live, &peak);
  const std::size_t bytes = static_cast<std::size_t>(peak - live) + (1u << 20);
  lowtide::t_local.in_report = 1;
  stats::large_live_add(bytes);
  lowtide::t_local.in_report = 0;
  std::uint64_t live2 = 0, peak2 = 0;
  CHECK(stats::large_peak_now() == peak);  // the raw peak: not raised
  stats::large_live_peak(&live2, &peak2);
  CHECK(live2 == live + bytes);  // the bytes are live all the same
  stats::large_live_sub(bytes);
  stats::large_live_peak(&live2, &peak2);
  CHECK(live2 == live);
  CHECK(peak2 == peak);
}
