// The reuse cache driven at random by four fake threads (Deps::self): takes
// of every kind (growth, prefer, alignments, skew), growth in place into the
// cache, frees, a miss's warm trial handed back or kept, evictions, purges,
// trims, a fork's reset and shrinking blocks. After every step the cache's
// and the arena's invariants hold and no live block overlaps another or a
// cached extent (a block handed out twice, or a rest cut wrongly, would).
// Written for the rest owners (take's back cuts, largest_below's ranking);
// the cases in cache_test.cpp pin each rule down, this looks for what they
// did not think of. Fixed seeds: a failure names its seed and step.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>
#include <random>
#include <algorithm>

#include "arena.hpp"
#include "test_arena.hpp"
#include "large_cache.hpp"

using lowtide::Arena;
using lowtide::Extent;
using lowtide::cache::Deps;
using lowtide::cache::ReuseCache;

namespace {
std::uint64_t fz_now = 1;
std::uint32_t fz_self = 1;
std::mt19937_64 fz_rng(1);
std::uint64_t fz_clock() { return fz_now; }
void fz_decommit(void*, std::size_t) {}
void fz_returned(std::size_t, lowtide::cache::Reason) {}
std::uint32_t fz_who() { return fz_self; }
std::size_t fz_res(const void*, std::size_t len) { return (fz_rng() % 2) ? len : len / 3; }
constexpr Deps kFzDeps{&fz_clock, &fz_decommit, &fz_returned, nullptr, nullptr, nullptr, &fz_res, &fz_who};
struct Blk { std::uint32_t start, n, owner; };
}  // namespace

TEST_CASE("fuzz: cache with rest owners") {
  constexpr std::size_t G = Arena::kGranule;
  Arena& a = test_arena();
  const std::uint32_t total = static_cast<std::uint32_t>(a.size() / G);
  // (Small enough for the valgrind run of the unit tests: ~0.2 s natively.)
  constexpr int kSeeds = 40, kSteps = 2000;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    fz_rng.seed(seed);
    fz_now = 1;
    ReuseCache c{a, kFzDeps};
    c.configure((fz_rng() % 2 ? 400 : 1000) * G, 1000, 100);
    std::vector<Blk> live;
    auto rnd = [](std::uint64_t n) { return fz_rng() % n; };
    auto overl = [](std::uint32_t s1, std::uint32_t n1, std::uint32_t s2, std::uint32_t n2) {
      return s1 < s2 + n2 && s2 < s1 + n1;
    };
    auto verify = [&](const char* what, int step) {
      const char* w = c.check();
      if (w) FAIL(what << " step " << step << " seed " << seed << ": " << w);
      ReuseCache::View v[ReuseCache::kSlots];
      int k = c.view(v);
      for (std::size_t i = 0; i < live.size(); ++i) {
        if (!a.is_used_extent(live[i].start, live[i].n))
          FAIL(what << " step " << step << " seed " << seed << ": live block not a used extent");
        for (std::size_t j = i + 1; j < live.size(); ++j)
          if (overl(live[i].start, live[i].n, live[j].start, live[j].n))
            FAIL(what << " step " << step << " seed " << seed << ": two live blocks overlap");
        for (int j = 0; j < k; ++j)
          if (overl(live[i].start, live[i].n, v[j].start, v[j].n))
            FAIL(what << " step " << step << " seed " << seed << ": live block overlaps cached entry");
      }
    };
    for (int step = 0; step < kSteps; ++step) {
      fz_now += rnd(30);
      fz_self = 1 + static_cast<std::uint32_t>(rnd(4));
      const int op = static_cast<int>(rnd(100));
      const char* what = "";
      if (op < 35) {  // allocate
        what = "take";
        std::uint32_t need = 1 + static_cast<std::uint32_t>(rnd(40));
        static const std::uint32_t aligns[] = {1, 1, 1, 2, 4, 32};
        std::uint32_t al = aligns[rnd(6)];
        std::uint32_t skew = al > 1 && rnd(2) ? 1 : 0;
        bool growth = rnd(2);
        std::uint32_t prefer = rnd(3) == 0 ? need + static_cast<std::uint32_t>(rnd(100)) : 0;
        std::uint32_t got = 0;
        std::uint32_t s = c.take(need, al, skew, growth, &got, prefer);
        if (s != Arena::kNone) {
          std::uint32_t n = growth ? got : need;
          REQUIRE(n >= need);
          REQUIRE(a.is_used_extent(s, n));
          if (al > 1) REQUIRE(reinterpret_cast<std::uintptr_t>(a.addr(s + skew)) % (al * G) == 0);
          live.push_back(Blk{s, n, fz_self});
        } else {
          c.evict_for(Extent::bytes_of(need), Extent::bytes_of(need));
          std::uint32_t f = a.alloc(need, al, skew);
          if (f == Arena::kNone) { c.purge(true); f = a.alloc(need, al, skew); }
          if (f != Arena::kNone) live.push_back(Blk{f, need, fz_self});
        }
      } else if (op < 55 && !live.empty()) {  // grow in place into the cache
        what = "take_at";
        Blk& b = live[rnd(live.size())];
        fz_self = b.owner;
        std::uint32_t k = 1 + static_cast<std::uint32_t>(rnd(20));
        if (c.take_at(b.start + b.n, k)) {
          a.join(b.start, b.n, b.n + k);
          b.n += k;
        } else if (a.grow(b.start, b.n, b.n + k)) {
          b.n += k;
        }
      } else if (op < 80 && !live.empty()) {  // free
        what = "put";
        std::size_t i = rnd(live.size());
        Blk b = live[i];
        live.erase(live.begin() + static_cast<long>(i));
        fz_self = b.owner;
        if (!c.put(b.start, b.n)) a.release(b.start, b.n);
      } else if (op < 85) {  // a miss's warm trial
        what = "trial";
        std::uint32_t n = 0;
        std::uint64_t freed = 0;
        std::uint32_t owner = 0;
        std::uint32_t s = c.largest_below(60, 2, &n, &freed);
        if (s != Arena::kNone && c.take_at(s, n, false, &owner)) {
          if (rnd(2)) {  // nothing came of it: back with its age and owner
            if (!c.put(s, n, freed ? freed : 1, owner)) a.release(s, n);
            c.end_trial(n);
          } else {
            c.note_taken(freed);
            c.end_trial(n);
            live.push_back(Blk{s, n, fz_self});
          }
        }
      } else if (op < 90) {
        what = "evict";
        c.evict_for(Extent::bytes_of(1 + static_cast<std::uint32_t>(rnd(200))), rnd(2) ? 0 : G);
      } else if (op < 95) {
        what = "purge";
        fz_now += rnd(500);
        c.purge(rnd(20) == 0);
      } else if (op < 97) {
        what = "trim";
        c.trim(Extent::bytes_of(1 + static_cast<std::uint32_t>(rnd(50))), lowtide::cache::Reason::demand);
      } else if (op < 98) {
        what = "fork";
        c.reset_after_fork();
      } else if (!live.empty()) {  // shrink a live block (tail to the arena)
        what = "shrink";
        Blk& b = live[rnd(live.size())];
        if (b.n > 1) {
          std::uint32_t m = 1 + static_cast<std::uint32_t>(rnd(b.n - 1));
          a.shrink(b.start, b.n, m);
          b.n = m;
        }
      }
      verify(what, step);
      if (step % 64 == 0) REQUIRE(a.check() == nullptr);
    }
    for (Blk& b : live) a.release(b.start, b.n);
    c.purge(true);
    REQUIRE(a.check() == nullptr);
    REQUIRE(a.free_granules() == total);
  }
}
