#include <catch2/catch.hpp>
#include <cstdint>

#include "large_cache.hpp"

using lowtide::cache::age_ns;

// purge() reads the clock, then the times other threads stored: a time
// stored after our clock read is later than `now`, and its age must be 0
// (not a wrapped ~584 years, which would return a block freed an instant
// ago, or skip the busy-cache grace).
TEST_CASE("a cache entry's age saturates at 0 for a time after now") {
  CHECK(age_ns(1000, 400) == 600);
  CHECK(age_ns(1000, 1000) == 0);
  CHECK(age_ns(1000, 1001) == 0);
  CHECK(age_ns(5, UINT64_MAX) == 0);  // oldest_ns of an empty cache
  CHECK(age_ns(UINT64_MAX, 0) == UINT64_MAX);
}
