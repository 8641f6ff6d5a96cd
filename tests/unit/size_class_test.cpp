// The malloc fast path counts a fresh small block's usable size from its
// size class (mi_good_size) instead of reading the block's page: check that
// against mi_usable_size for every request size lowtide can hand mimalloc
// below the limit, and that the limit is where mimalloc stops agreeing.
#include <catch2/catch.hpp>

#include "small_path.hpp"

using namespace lowtide;

TEST_CASE("size-class usable size equals mi_usable_size for every small request") {
  small::configure();
  REQUIRE(small::class_exact_max == small::kClassExactMax);
  std::size_t mismatches = 0, checked = 0;
  for (std::size_t n = 0; n <= small::kClassExactMax + 4096; ++n) {
    if (n > 4096 && n % 16 != 1 && n % 16 != 0) continue;  // every class edge, fewer interiors
    void* p = small::allocate(n);
    REQUIRE(p != nullptr);
    if (small_request(n) <= small::class_exact_max) {
      ++checked;
      if (small::usable_of_new(p, n) != mi_usable_size(p)) ++mismatches;
    }
    small::release(p);
  }
  CHECK(checked > 16000);
  CHECK(mismatches == 0);
}

TEST_CASE("mi_good_size stops matching above the limit, so the limit is needed") {
  // If this starts to fail, a newer mimalloc agrees further up and the limit
  // could be raised.
  CHECK_FALSE(small::class_sizes_match(small::kClassExactMax * 2));
}
