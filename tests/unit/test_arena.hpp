// One 64 MiB arena per test binary, shared by the cache and large-path unit
// tests (each case checks that it is whole again when it ends).
#pragma once
#include <catch2/catch.hpp>

#include <cstddef>

#include "arena.hpp"

inline lowtide::Arena& test_arena() {
  static lowtide::Arena a;
  static bool ok = a.init(std::size_t{64} << 20, std::size_t{64} << 20);
  REQUIRE(ok);
  return a;
}
