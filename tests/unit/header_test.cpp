#include <catch2/catch.hpp>
#include <cstring>

#include "header.hpp"

using namespace lowtide;

TEST_CASE("the header encodes provenance and validates only at its own address") {
  alignas(64) unsigned char block[256];
  std::memset(block, 0xab, sizeof block);
  void* user = block + 128;
  BlockHeader* h = header_of(user);
  CHECK(reinterpret_cast<unsigned char*>(h) == block + 64);
  encode_header(h, user, 0x1000, 0x20000, 12345, 4096, Origin::calloc, kFromSmall, 42);
  CHECK(header_valid(h, user));
  CHECK(h->base == 0x1000);
  CHECK(h->length == 0x20000);
  CHECK(h->requested == 12345);
  CHECK(h->alignment == 4096);
  CHECK(h->origin == Origin::calloc);
  CHECK(h->flags == kFromSmall);
  CHECK(h->tid == 42);
  CHECK(h->site == 0);
  // A copy of the header elsewhere does not validate for another pointer.
  void* other = block + 192;
  std::memcpy(header_of(other), h, sizeof *h);
  CHECK_FALSE(header_valid(header_of(other), other));
  h->magic ^= 1;
  CHECK_FALSE(header_valid(h, user));
}
