// stats::read_slot: a report reads each thread's counters while the thread
// counts (a call, then its histogram bucket). A pass torn by the owner
// counting between the reader's two reads is off by the calls counted
// meanwhile, and a stalled reader (an interrupt, a preemption) lets
// thousands through: the pass kept must be the least torn one, not the last.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>

#include "stats.hpp"

namespace stats = lowtide::stats;

namespace {

constexpr unsigned kBucket = 7;
std::uint64_t hook_bumps[300];  // what the owner counts in each pass, between the reader's two reads
int hook_passes = 0;

void count_calls(const stats::Slot* cs, int pass) {
  auto* s = const_cast<stats::Slot*>(cs);
  ++hook_passes;
  const std::uint64_t n = pass < 300 ? hook_bumps[pass] : 0;
  // As malloc counts: the call, then its bucket.
  __atomic_fetch_add(&s->c[stats::malloc_calls], n, __ATOMIC_RELAXED);
  __atomic_fetch_add(&s->hist[kBucket], n, __ATOMIC_RELAXED);
}

struct Hooked {
  std::unique_ptr<stats::Slot> slot{new stats::Slot{}};
  std::uint64_t c[stats::kCounters] = {};
  std::uint64_t h[stats::kHistBuckets] = {};
  explicit Hooked(std::initializer_list<std::uint64_t> bumps) {
    for (auto& b : hook_bumps) b = 0;
    int i = 0;
    for (std::uint64_t b : bumps) hook_bumps[i++] = b;
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

TEST_CASE("read_slot: three passes torn by one call, then a stalled one: the least torn is kept") {
  Hooked r({1, 1, 1, 10000});
  CHECK(hook_passes == 4);
  CHECK(r.ahead() == 1);  // the last pass is 10,000 ahead
}

TEST_CASE("read_slot: passes torn by more than a few dozen calls: it reads on until one is close") {
  Hooked r({5000, 4000, 3000, 2000, 1000, 500, 3});
  CHECK(hook_passes == 7);
  CHECK(r.ahead() == 3);
}

TEST_CASE("read_slot: an owner that never lets a pass through: bounded, the least torn kept") {
  std::initializer_list<std::uint64_t> many = {900, 800, 700, 650, 700, 800, 900, 1000};
  Hooked r(many);
  // (Passes past the list count nothing: the ninth pass is clean.)
  CHECK(hook_passes == 9);
  CHECK(r.ahead() == 0);
  // Every pass torn: the reader stops after its bound of passes.
  for (auto& b : hook_bumps) b = 100;
  hook_passes = 0;
  stats::read_slot_hook = count_calls;
  std::uint64_t c[stats::kCounters], h[stats::kHistBuckets];
  stats::read_slot(r.slot.get(), c, h);
  stats::read_slot_hook = nullptr;
  CHECK(hook_passes == 256);
  CHECK(static_cast<std::int64_t>(h[kBucket]) - static_cast<std::int64_t>(c[stats::malloc_calls]) == 100);
}
