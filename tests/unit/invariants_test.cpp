// The invariant checks (src/invariants.hpp) find what they are meant to:
// each corruption is made on purpose in a test object and must be reported.
#include <catch2/catch.hpp>
#include <string>

#include "arena.hpp"
#include "invariants.hpp"
#include "large_space.hpp"
#include "state.hpp"

namespace lowtide {
struct ArenaTestAccess {
  static std::uint32_t& tag(Arena& a, std::uint32_t g) { return a.tag_[g]; }
  static std::uint32_t& next(Arena& a, std::uint32_t g) { return a.next_[g]; }
};
}  // namespace lowtide

using lowtide::Arena;
using lowtide::ArenaTestAccess;

namespace {
Arena& test_arena() {
  static Arena a;
  static bool ok = a.init(std::size_t{64} << 20, std::size_t{64} << 20);
  REQUIRE(ok);
  return a;
}
bool says(const char* why, const char* what) { return why != nullptr && std::string(why).find(what) != std::string::npos; }
}  // namespace

TEST_CASE("invariants: the arena check reports a corrupted extent map") {
  Arena& a = test_arena();
  std::uint32_t s = a.alloc(4, 1), t = a.alloc(2, 1);
  REQUIRE(s != Arena::kNone);
  REQUIRE(t != Arena::kNone);
  a.release(t, 2);
  REQUIRE(a.check() == nullptr);
  std::uint32_t& end = ArenaTestAccess::tag(a, s + 3);
  const std::uint32_t saved = end;
  SECTION("tags at the two ends differ") {
    end = saved - 1;
    CHECK(says(a.check(), "tags at its two ends differ"));
  }
  SECTION("an extent runs past the range") {
    std::uint32_t& start = ArenaTestAccess::tag(a, s);
    const std::uint32_t keep = start;
    start = (start & 0xc0000000u) | 0x3fffffffu;
    CHECK(says(a.check(), "past the range"));
    start = keep;
  }
  SECTION("a free extent missing from its list, a used one in it") {
    // Two free extents of 4 in one bin, kept apart by used ones.
    std::uint32_t a1 = a.alloc(4, 1), b1 = a.alloc(1, 1), a2 = a.alloc(4, 1), b2 = a.alloc(1, 1);
    a.release(a1, 4);
    a.release(a2, 4);
    REQUIRE(a.check() == nullptr);
    std::uint32_t head = ArenaTestAccess::next(a, a1) == Arena::kNone ? a2 : a1;  // inserted last
    std::uint32_t& nx = ArenaTestAccess::next(a, head);
    const std::uint32_t keep = nx;
    REQUIRE(keep != Arena::kNone);
    nx = Arena::kNone;
    CHECK(says(a.check(), "missing from the free lists"));
    nx = keep;
    std::uint32_t& t1 = ArenaTestAccess::tag(a, keep);
    std::uint32_t& t2 = ArenaTestAccess::tag(a, keep + 3);
    const std::uint32_t k1 = t1, k2 = t2;
    t1 = t2 = 4 | 0x80000000u;  // marked used, still listed
    CHECK(says(a.check(), "not free"));
    t1 = k1;
    t2 = k2;
    REQUIRE(a.check() == nullptr);
    a.release(b1, 1);
    a.release(b2, 1);
  }
  end = saved;
  CHECK(a.check() == nullptr);
  a.release(s, 4);
  CHECK(a.check() == nullptr);
  CHECK(a.free_granules() == a.size() / Arena::kGranule);
}

TEST_CASE("invariants: a counter below zero is reported") {
  REQUIRE(lowtide::invariants::check_counters() == nullptr);
  lowtide::large::space.mapped.fetch_sub(1);
  CHECK(says(lowtide::invariants::check_counters(), "large_mapped below zero"));
  lowtide::large::space.mapped.fetch_add(1);
  lowtide::large::space.blocks.fetch_sub(1);
  CHECK(says(lowtide::invariants::check_counters(), "large_blocks below zero"));
  lowtide::large::space.blocks.fetch_add(1);
  CHECK(lowtide::invariants::check_all(true) == nullptr);
}
