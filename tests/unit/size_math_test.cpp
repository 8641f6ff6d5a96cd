#include <catch2/catch.hpp>
#include <cstdint>

#include "size_math.hpp"

using namespace lowtide;

TEST_CASE("small requests are multiples of 16, never 0") {
  CHECK(small_request(0) == 16);
  CHECK(small_request(1) == 16);
  CHECK(small_request(16) == 16);
  CHECK(small_request(17) == 32);
  CHECK(small_request(24) == 32);
  for (std::size_t n = 0; n < 5000; ++n) {
    std::size_t r = small_request(n);
    REQUIRE(r % 16 == 0);
    REQUIRE(r >= n);
    REQUIRE(r - n < 16 + (n == 0 ? 1 : 0));
  }
}

TEST_CASE("alignment follows glibc's memalign rules") {
  CHECK(effective_alignment(0) == 16);
  CHECK(effective_alignment(3) == 16);
  CHECK(effective_alignment(16) == 16);
  CHECK(effective_alignment(17) == 32);
  CHECK(effective_alignment(48) == 64);
  CHECK(effective_alignment(4096) == 4096);
  CHECK(effective_alignment(4097) == 8192);
  CHECK(effective_alignment(SIZE_MAX / 2 + 1) == SIZE_MAX / 2 + 1);
  CHECK(effective_alignment(SIZE_MAX / 4 + 2) == SIZE_MAX / 2 + 1);
}

TEST_CASE("powers of two and rounding") {
  CHECK_FALSE(is_pow2(0));
  CHECK(is_pow2(1));
  CHECK(is_pow2(std::size_t{1} << 63));
  CHECK_FALSE(is_pow2(3));
  CHECK(next_pow2(0) == 1);
  CHECK(next_pow2(5) == 8);
  CHECK(next_pow2(std::size_t{1} << 40) == std::size_t{1} << 40);
  CHECK(round_up(1, 4096) == 4096);
  CHECK(round_up(4096, 4096) == 4096);
  CHECK(round_up(0, 65536) == 0);
}

TEST_CASE("checked multiplication catches every overflow") {
  std::size_t out = 0;
  CHECK(checked_mul(3, 5, &out));
  CHECK(out == 15);
  CHECK_FALSE(checked_mul(SIZE_MAX, 2, &out));
  CHECK_FALSE(checked_mul(std::size_t{1} << 32, std::size_t{1} << 32, &out));
  CHECK(checked_mul(0, SIZE_MAX, &out));
  CHECK(out == 0);
  CHECK(kMaxRequest == static_cast<std::size_t>(PTRDIFF_MAX));
}
