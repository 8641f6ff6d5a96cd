#include <catch2/catch.hpp>

#include "parse.hpp"

using lowtide::format_duration_ms;
using lowtide::parse_duration_ms;
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

TEST_CASE("durations: ms, s, m, h, a bare number in ms") {
  std::uint64_t v = 0;
  CHECK(parse_duration_ms("500ms", &v) == ParseStatus::ok);
  CHECK(v == 500);
  CHECK(parse_duration_ms(" 10 S ", &v) == ParseStatus::ok);
  CHECK(v == 10'000);
  CHECK(parse_duration_ms("2m", &v) == ParseStatus::ok);
  CHECK(v == 120'000);
  CHECK(parse_duration_ms("1h", &v) == ParseStatus::ok);
  CHECK(v == 3'600'000);
  CHECK(parse_duration_ms("250", &v) == ParseStatus::ok);
  CHECK(v == 250);
  for (const char* bad : {"1.5s", "-1s", "+1s", "1d", "s", "1 s s", "1sm", "0x10", "1e3"}) {
    INFO(bad);
    CHECK(parse_duration_ms(bad, &v) == ParseStatus::garbage);
  }
  // Size suffixes mean nothing on a duration ("1K" was once read as 1024 ms).
  for (const char* bad : {"1K", "1k", "1G", "1KiB", "1min", "1 ms s", "1sms"}) {
    INFO(bad);
    v = 7;
    CHECK(parse_duration_ms(bad, &v) == ParseStatus::garbage);
  }
  CHECK(parse_duration_ms("  ", &v) == ParseStatus::empty);
  CHECK(parse_duration_ms("99999999999999999999", &v) == ParseStatus::overflow);
  CHECK(parse_duration_ms("18446744073709551615h", &v) == ParseStatus::overflow);
}

TEST_CASE("format_duration_ms picks the largest unit that divides, and round-trips") {
  char buf[32];
  CHECK(std::string(format_duration_ms(100, buf, sizeof buf)) == "100 ms");
  CHECK(std::string(format_duration_ms(10'000, buf, sizeof buf)) == "10 s");
  CHECK(std::string(format_duration_ms(120'000, buf, sizeof buf)) == "2 m");
  CHECK(std::string(format_duration_ms(86'400'000, buf, sizeof buf)) == "24 h");
  CHECK(std::string(format_duration_ms(0, buf, sizeof buf)) == "0 ms");
  for (std::uint64_t ms : {1ull, 999ull, 1000ull, 61'000ull, 3'600'000ull, 90'061'001ull}) {
    std::uint64_t back = 0;
    REQUIRE(parse_duration_ms(format_duration_ms(ms, buf, sizeof buf), &back) == ParseStatus::ok);
    CHECK(back == ms);
  }
}
