#include <catch2/catch.hpp>

#include "parse.hpp"

using lowtide::parse_size;
using lowtide::ParseStatus;

namespace {
std::uint64_t size_of(const char* s) {
  std::uint64_t v = 12345;
  REQUIRE(parse_size(s, &v) == ParseStatus::ok);
  return v;
}
ParseStatus status_of(const char* s) {
  std::uint64_t v = 777;
  ParseStatus st = parse_size(s, &v);
  if (st != ParseStatus::ok) CHECK(v == 777);  // failure leaves the output alone
  return st;
}
}  // namespace

TEST_CASE("sizes in every documented spelling") {
  CHECK(size_of("1048576") == 1048576);
  CHECK(size_of("1M") == 1048576);
  CHECK(size_of("1m") == 1048576);
  CHECK(size_of("1MB") == 1048576);
  CHECK(size_of("1MiB") == 1048576);
  CHECK(size_of("1mib") == 1048576);
  CHECK(size_of("512K") == 512 * 1024);
  CHECK(size_of("512KiB") == 512 * 1024);
  CHECK(size_of("2G") == (std::uint64_t{2} << 30));
  CHECK(size_of("1T") == (std::uint64_t{1} << 40));
  CHECK(size_of("100B") == 100);
  CHECK(size_of("0") == 0);
  CHECK(size_of("  64K  ") == 65536);
}

TEST_CASE("bad sizes are rejected, never wrapped") {
  CHECK(status_of("") == ParseStatus::empty);
  CHECK(status_of("   ") == ParseStatus::empty);
  CHECK(status_of(nullptr) == ParseStatus::empty);
  CHECK(status_of("abc") == ParseStatus::garbage);
  CHECK(status_of("-1") == ParseStatus::garbage);
  CHECK(status_of("+1") == ParseStatus::garbage);
  CHECK(status_of("1X") == ParseStatus::garbage);
  CHECK(status_of("1Mi") == ParseStatus::garbage);
  CHECK(status_of("1 M B") == ParseStatus::garbage);
  CHECK(status_of("1.5M") == ParseStatus::garbage);
  CHECK(status_of("0x100") == ParseStatus::garbage);
  CHECK(status_of("18446744073709551615") == ParseStatus::ok);
  CHECK(status_of("18446744073709551616") == ParseStatus::overflow);
  CHECK(status_of("99999999999999999999999") == ParseStatus::overflow);
  CHECK(status_of("16777216T") == ParseStatus::overflow);
  CHECK(status_of("16777215T") == ParseStatus::ok);
}

TEST_CASE("choices match whole words, any case") {
  const char* const words[] = {"off", "on", "json"};
  CHECK(lowtide::parse_choice("off", words, 3) == 0);
  CHECK(lowtide::parse_choice("ON", words, 3) == 1);
  CHECK(lowtide::parse_choice("Json ", words, 3) == 2);
  CHECK(lowtide::parse_choice("o", words, 3) == -1);
  CHECK(lowtide::parse_choice("onn", words, 3) == -1);
  CHECK(lowtide::parse_choice("", words, 3) == -1);
}

TEST_CASE("format_size round-trips through parse_size") {
  char buf[32];
  for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1000}, std::uint64_t{1024},
                          std::uint64_t{1} << 20, std::uint64_t{3} << 30, std::uint64_t{5} << 40,
                          std::uint64_t{1536}}) {
    lowtide::format_size(v, buf, sizeof buf);
    std::uint64_t back = 0;
    INFO(buf);
    REQUIRE(parse_size(buf, &back) == ParseStatus::garbage);  // "1 MiB" has a space inside
    std::string squeezed;
    for (const char* c = buf; *c; ++c)
      if (*c != ' ') squeezed += *c;
    REQUIRE(parse_size(squeezed.c_str(), &back) == ParseStatus::ok);
    CHECK(back == v);
  }
  CHECK(std::string(lowtide::format_size(std::uint64_t{1} << 20, buf, sizeof buf)) == "1 MiB");
  CHECK(std::string(lowtide::format_size(1536, buf, sizeof buf)) == "1536 B");
}

TEST_CASE("durations: bare milliseconds, ms, s; nothing else") {
  using lowtide::parse_duration_ms;
  std::uint64_t v = 0;
  struct { const char* s; std::uint64_t ms; } good[] = {
      {"0", 0}, {"500", 500}, {"500ms", 500}, {"500MS", 500}, {"500 ms", 500}, {" 2s ", 2000}, {"2 S", 2000},
      {"18446744073709551615", UINT64_MAX}, {"18446744073709551s", 18446744073709551000ull}};
  for (auto& g : good) {
    INFO(g.s);
    REQUIRE(parse_duration_ms(g.s, &v) == ParseStatus::ok);
    CHECK(v == g.ms);
  }
  for (const char* bad : {"1K", "1k", "1M", "1G", "1KiB", "1m", "1min", "1h", "1.5s", "-1", "+1", "s", "ms", "1 ms s",
                          "1sms", "0x10", "1e3"}) {
    INFO(bad);
    v = 7;
    CHECK(parse_duration_ms(bad, &v) == ParseStatus::garbage);
    CHECK(v == 7);
  }
  CHECK(parse_duration_ms("", &v) == ParseStatus::empty);
  CHECK(parse_duration_ms("  ", &v) == ParseStatus::empty);
  CHECK(parse_duration_ms(nullptr, &v) == ParseStatus::empty);
  CHECK(parse_duration_ms("18446744073709551616", &v) == ParseStatus::overflow);
  CHECK(parse_duration_ms("18446744073709552s", &v) == ParseStatus::overflow);
}

TEST_CASE("format_duration_ms reads back") {
  char buf[32];
  CHECK(std::string(lowtide::format_duration_ms(3'600'000, buf, sizeof buf)) == "3600 s");
  CHECK(std::string(lowtide::format_duration_ms(1, buf, sizeof buf)) == "1 ms");
  CHECK(std::string(lowtide::format_duration_ms(0, buf, sizeof buf)) == "0 ms");
  for (std::uint64_t ms : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{999}, std::uint64_t{1000},
                           std::uint64_t{1500}, UINT64_MAX}) {
    std::uint64_t back = 1;
    REQUIRE(lowtide::parse_duration_ms(lowtide::format_duration_ms(ms, buf, sizeof buf), &back) == ParseStatus::ok);
    CHECK(back == ms);
  }
}
