#include <catch2/catch.hpp>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "arena.hpp"

using lowtide::Arena;

namespace {
// Who owns each granule: an overlap between two live extents is a bug.
struct Owners {
  std::vector<std::atomic<int>> g;
  explicit Owners(std::size_t n) : g(n) {}
  bool take(std::uint32_t s, std::uint32_t n, int id) {
    bool ok = true;
    for (std::uint32_t i = s; i < s + n; ++i) {
      int z = 0;
      if (!g[i].compare_exchange_strong(z, id)) ok = false;
    }
    return ok;
  }
  void drop(std::uint32_t s, std::uint32_t n) {
    for (std::uint32_t i = s; i < s + n; ++i) g[i].store(0);
  }
};
}  // namespace

TEST_CASE("arena extents never overlap under concurrent alloc, grow, shrink and release") {
  static Arena a;  // large: the range tables
  REQUIRE(a.init(std::size_t{1} << 30, std::size_t{64} << 20));
  const std::uint32_t total = static_cast<std::uint32_t>(a.size() >> Arena::kGranuleShift);
  Owners own(total);
  std::atomic<int> overlaps{0};
  std::vector<std::thread> ts;
  for (int t = 1; t <= 4; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 r(static_cast<unsigned>(t));
      struct B { std::uint32_t s, n; };
      std::vector<B> mine;
      for (int it = 0; it < 20000; ++it) {
        unsigned op = r() % 4;
        if (op == 0 || mine.empty()) {
          std::uint32_t n = 1 + r() % 200;
          std::uint32_t al = 1u << (r() % 6);
          std::uint32_t s = a.alloc(n, al);
          if (s == Arena::kNone) continue;
          if ((((a.base() + (std::uintptr_t{s} << Arena::kGranuleShift))) & ((std::uintptr_t{al} << Arena::kGranuleShift) - 1)) != 0)
            overlaps.fetch_add(1000);
          if (!own.take(s, n, t)) overlaps.fetch_add(1);
          if (a.used_length(s) != n) overlaps.fetch_add(1);
          mine.push_back({s, n});
        } else {
          std::size_t i = r() % mine.size();
          B& b = mine[i];
          if (op == 1) {
            own.drop(b.s, b.n);
            a.release(b.s, b.n);
            mine[i] = mine.back();
            mine.pop_back();
          } else if (op == 2) {
            std::uint32_t m = b.n + 1 + r() % 100;
            if (a.grow(b.s, b.n, m)) {
              if (!own.take(b.s + b.n, m - b.n, t)) overlaps.fetch_add(1);
              b.n = m;
            }
          } else if (b.n > 1) {
            std::uint32_t m = 1 + r() % (b.n - 1);
            own.drop(b.s + m, b.n - m);
            a.shrink(b.s, b.n, m);
            b.n = m;
          }
          if (!mine.empty() && op != 1 && a.used_length(b.s) != b.n) overlaps.fetch_add(1);
        }
      }
      for (B& b : mine) {
        own.drop(b.s, b.n);
        a.release(b.s, b.n);
      }
    });
  }
  for (auto& t : ts) t.join();
  CHECK(overlaps.load() == 0);
  // Everything released: the whole range is one free extent again.
  std::uint32_t s = a.alloc(total, 1);
  CHECK(s == 0);
}

TEST_CASE("live table: exactly one claim wins, interior pointers never match") {
  static Arena a;
  REQUIRE(a.init(std::size_t{256} << 20, std::size_t{64} << 20));
  std::uint32_t s = a.alloc(4, 1);
  REQUIRE(s != Arena::kNone);
  char* user = a.addr(s) + 64;
  a.publish(user, s);
  CHECK(a.lookup(user) == s);
  CHECK(a.lookup(user + 16) == Arena::kNone);
  CHECK(a.lookup(user + 1) == Arena::kNone);
  CHECK(a.lookup(a.addr(s + 1) + 64) == Arena::kNone);
  CHECK(a.claim(user + 16) == Arena::kNone);
  CHECK(a.claim(user) == s);
  CHECK(a.claim(user) == Arena::kNone);
  CHECK(a.lookup(user) == Arena::kNone);
}

TEST_CASE("skewed alignment: the granule after the start is aligned") {
  static Arena a;
  REQUIRE(a.init(std::size_t{1} << 30, std::size_t{64} << 20));
  for (std::uint32_t align_g : {2u, 32u, 64u, 1024u}) {
    std::uint32_t s = a.alloc(3, align_g, 1);
    REQUIRE(s != Arena::kNone);
    auto addr = reinterpret_cast<std::uintptr_t>(a.addr(s + 1));
    CHECK(addr % (std::uintptr_t{align_g} << Arena::kGranuleShift) == 0);
    a.release(s, 3);
  }
  CHECK(a.alloc(1, 4, 1) == Arena::kNone);  // the skew must fall inside the extent
}
