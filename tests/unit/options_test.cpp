#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "options.hpp"
#include "route.hpp"

using namespace lowtide;

namespace {
std::vector<std::string> warnings;
void record(const char* env, const char* value, const char* reason, const char* def) {
  warnings.push_back(std::string(env) + "|" + value + "|" + reason + "|" + def);
}
Config load(std::vector<const char*> env, bool secure = false) {
  warnings.clear();
  env.push_back(nullptr);
  Config c{};
  load_config(&c, env.data(), secure, &record);
  return c;
}
}  // namespace

TEST_CASE("defaults come from the table") {
  Config c = load({"PATH=/bin", "HOME=/root"});
  CHECK(c.get(Opt::cutoff) == (std::uint64_t{128} << 10));
  CHECK(c.get(Opt::reserve) == (std::uint64_t{1} << 40));
  CHECK(warnings.empty());
}

TEST_CASE("values are parsed, bad ones warned about and replaced by the default") {
  Config c = load({"LOWTIDE_CUTOFF=512K"});
  CHECK(c.get(Opt::cutoff) == 512 * 1024);
  CHECK(warnings.empty());

  for (const char* bad : {"LOWTIDE_CUTOFF=", "LOWTIDE_CUTOFF=abc", "LOWTIDE_CUTOFF=-5",
                          "LOWTIDE_CUTOFF=99999999999999999999999", "LOWTIDE_CUTOFF=1", "LOWTIDE_CUTOFF=2T"}) {
    INFO(bad);
    c = load({bad});
    CHECK(c.get(Opt::cutoff) == (std::uint64_t{128} << 10));
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].rfind("LOWTIDE_CUTOFF|", 0) == 0);
    CHECK(warnings[0].find("|128KiB") != std::string::npos);
  }
  c = load({"LOWTIDE_CUTOFFX=5M", "XLOWTIDE_CUTOFF=5M"});
  CHECK(c.get(Opt::cutoff) == (std::uint64_t{128} << 10));
  CHECK(warnings.empty());
}

TEST_CASE("setuid processes ignore every LOWTIDE_ variable") {
  Config c = load({"LOWTIDE_CUTOFF=512K", "LOWTIDE_RESERVE=abc"}, true);
  CHECK(c.get(Opt::cutoff) == (std::uint64_t{128} << 10));
  CHECK(warnings.empty());
}

TEST_CASE("docs/configuration.md documents every option with its default") {
  const char* root = std::getenv("LOWTIDE_SOURCE_ROOT");
  REQUIRE(root != nullptr);
  std::ifstream f(std::string(root) + "/docs/configuration.md");
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  std::string doc = ss.str();
  for (const OptionSpec& o : kOptions) {
    INFO(o.env);
    std::string row = std::string("| `") + o.env + "` |";
    auto at = doc.find(row);
    REQUIRE(at != std::string::npos);
    std::string line = doc.substr(at, doc.find('\n', at) - at);
    CHECK(line.find(std::string("`") + o.default_text + "`") != std::string::npos);
    // | `NAME` | unit | `default` | ...
    CHECK(line.find(std::string("` | ") + o.unit + " | `") != std::string::npos);
    if (o.kind == OptKind::size || o.kind == OptKind::count || o.kind == OptKind::duration) {
      char valid[160];
      describe_valid(o, valid, sizeof valid);
      CHECK(line.find(std::string("Accepted range ") + valid + ".") != std::string::npos);
    }
    for (int i = 0; i < o.nchoices; ++i) CHECK(line.find(std::string("`") + o.choices[i] + "`") != std::string::npos);
  }
  // And nothing documented that the table does not have.
  std::size_t pos = 0;
  int rows = 0;
  while ((pos = doc.find("| `LOWTIDE_", pos)) != std::string::npos) {
    ++rows;
    ++pos;
  }
  CHECK(rows == static_cast<int>(sizeof kOptions / sizeof kOptions[0]));
}

TEST_CASE("the cutoff before init is the table's default") {
  CHECK(route::Settings{}.cutoff == load({}).get(Opt::cutoff));
  CHECK(route::Settings{}.shrink_below == load({}).get(Opt::cutoff) / 2);
}

TEST_CASE("describe_valid names what each kind accepts") {
  char buf[160];
  describe_valid(*find_option("LOWTIDE_CUTOFF"), buf, sizeof buf);
  CHECK(std::string(buf) == "4 KiB to 1 TiB");
  describe_valid(*find_option("LOWTIDE_DECAY_MS"), buf, sizeof buf);
  CHECK(std::string(buf) == "1 ms to 1 h");
  describe_valid(*find_option("LOWTIDE_HUGEPAGES"), buf, sizeof buf);
  CHECK(std::string(buf) == "on, off, advise");
  describe_valid(*find_option("LOWTIDE_STATS_FILE"), buf, sizeof buf);
  CHECK(std::string(buf) == "1 to 1023 bytes");
  describe_valid(*find_option("LOWTIDE_STATS_INTERVAL"), buf, sizeof buf);
  CHECK(std::string(buf) == "off or 100 ms to 24 h");
  describe_valid(*find_option("LOWTIDE_CUTOFF"), buf, 6);
  CHECK(std::string(buf) == "4 KiB");
  CHECK(find_option("LOWTIDE_CUTOF") == nullptr);
  CHECK(find_option("LOWTIDE_CUTOFFX") == nullptr);
}

TEST_CASE("LOWTIDE_SITES takes a plain count, LOWTIDE_SITE_SAMPLE a size") {
  Config c = load({"LOWTIDE_SITES=12", "LOWTIDE_SITE_SAMPLE=4M"});
  CHECK(c.get(Opt::sites) == 12);
  CHECK(c.get(Opt::site_sample) == (std::uint64_t{4} << 20));
  CHECK(warnings.empty());
  c = load({});
  CHECK(c.get(Opt::sites) == 0);
  CHECK(c.get(Opt::site_sample) == (std::uint64_t{2} << 20));
  CHECK(load({"LOWTIDE_SITE_SAMPLE=0"}).get(Opt::site_sample) == 0);
  for (const char* bad : {"LOWTIDE_SITES=1K", "LOWTIDE_SITES=abc", "LOWTIDE_SITES=-1", "LOWTIDE_SITES=4097",
                          "LOWTIDE_SITES="}) {
    INFO(bad);
    c = load({bad});
    CHECK(c.get(Opt::sites) == 0);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].rfind("LOWTIDE_SITES|", 0) == 0);
    CHECK(warnings[0].find("|0") != std::string::npos);
  }
  // Blanks around a count, as around every other value; between digits a
  // count's reason, not a size's ("is not a size (e.g. 1M, ...)" before).
  CHECK(load({"LOWTIDE_SITES= 12\t"}).get(Opt::sites) == 12);
  CHECK(load({"LOWTIDE_SITES=12\n"}).get(Opt::sites) == 12);
  CHECK(warnings.empty());
  c = load({"LOWTIDE_SITES=1 2"});
  CHECK(c.get(Opt::sites) == 0);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "LOWTIDE_SITES|1 2|is not a whole number|0");
  c = load({"LOWTIDE_SITE_SAMPLE=2G"});
  CHECK(c.get(Opt::site_sample) == (std::uint64_t{2} << 20));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("|2MiB") != std::string::npos);
}

TEST_CASE("every option: empty, garbage, negative, huge and overflowing values warn once and keep the default") {
  Config defaults = load({});
  const std::string long_text(5000, '7');
  const std::vector<std::string> size_bad = {"", "   ", "abc", "-1", "-0", "+5", "1.5M", "0x10", "1e9", "12 34",
                                             "5 MiB B", "1P", "99999999999999999999999", "16777216T",
                                             "18446744073709551615", long_text};
  const std::vector<std::string> choice_bad = {"", " ", "garbage", "-1", "2", "99999999999999999999", "onn",
                                               "on off", long_text};
  const std::vector<std::string> text_bad = {"", std::string(kTextMax, 'p')};
  const std::vector<std::string> duration_bad = {"", "   ", "abc", "-1", "+5", "1.5s", "0x10", "1e3", "12 34",
                                                 "1K", "1G", "2d", "5 ms s", "5sec", "1 hour", "99999999999999999999999",
                                                 "18446744073709551615s", long_text};
  for (unsigned i = 0; i < static_cast<unsigned>(Opt::count); ++i) {
    const OptionSpec& o = kOptions[i];
    std::vector<std::string> bad = o.kind == OptKind::size       ? size_bad
                                   : o.kind == OptKind::choice   ? choice_bad
                                   : o.kind == OptKind::duration ? duration_bad
                                                                 : text_bad;
    if (o.kind == OptKind::size || o.kind == OptKind::duration) {
      if (o.min > 0) bad.push_back(std::to_string(o.min - 1));  // just below the range
      bad.push_back(std::to_string(o.max + 1));                  // just above it
    }
    for (const std::string& v : bad) {
      INFO(o.env << "='" << v.substr(0, 40) << "'");
      const std::string entry = std::string(o.env) + "=" + v;
      Config c = load({entry.c_str()});
      REQUIRE(warnings.size() == 1);
      // "variable|value|reason|default", the reason not empty
      const std::string head = std::string(o.env) + "|" + v + "|";
      const std::string tail = std::string("|") + o.default_text;
      CHECK(warnings[0].rfind(head, 0) == 0);
      CHECK(warnings[0].size() > head.size() + tail.size());
      CHECK(warnings[0].compare(warnings[0].size() - tail.size(), tail.size(), tail) == 0);
      CHECK(c.value[i] == defaults.value[i]);
      CHECK(std::string(c.text[i]) == defaults.text[i]);
    }
  }
}

TEST_CASE("LOWTIDE_STATS_INTERVAL takes a duration or off; LOWTIDE_STATS takes prometheus") {
  CHECK(load({}).get(Opt::stats_interval) == kSizeWord);
  CHECK(load({"LOWTIDE_STATS_INTERVAL=10s"}).get(Opt::stats_interval) == 10'000);
  CHECK(load({"LOWTIDE_STATS_INTERVAL=500ms"}).get(Opt::stats_interval) == 500);
  CHECK(load({"LOWTIDE_STATS_INTERVAL=1m"}).get(Opt::stats_interval) == 60'000);
  CHECK(load({"LOWTIDE_STATS_INTERVAL=OFF"}).get(Opt::stats_interval) == kSizeWord);
  CHECK(warnings.empty());
  for (const char* bad : {"LOWTIDE_STATS_INTERVAL=99ms", "LOWTIDE_STATS_INTERVAL=25h", "LOWTIDE_STATS_INTERVAL=0",
                          "LOWTIDE_STATS_INTERVAL=10 sec", "LOWTIDE_STATS_INTERVAL=1.5s"}) {
    INFO(bad);
    CHECK(load({bad}).get(Opt::stats_interval) == kSizeWord);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].rfind("LOWTIDE_STATS_INTERVAL|", 0) == 0);
  }
  CHECK(stats_mode(load({"LOWTIDE_STATS=prometheus"}).get(Opt::stats)) == StatsMode::prometheus);
}

TEST_CASE("a bad value for one option leaves the others as set") {
  Config c = load({"LOWTIDE_CUTOFF=banana", "LOWTIDE_CACHE=0", "LOWTIDE_STATS=json", "LOWTIDE_DECAY_MS=-3"});
  CHECK(warnings.size() == 2);
  CHECK(c.get(Opt::cutoff) == (std::uint64_t{128} << 10));
  CHECK(c.get(Opt::cache) == 0);
  CHECK(stats_mode(c.get(Opt::stats)) == StatsMode::json);
  CHECK(c.get(Opt::decay_ms) == 500);
}

TEST_CASE("durations take ms, s, m and h; a bare number is milliseconds; size suffixes are refused") {
  CHECK(load({"LOWTIDE_DECAY_MS=250"}).get(Opt::decay_ms) == 250);
  CHECK(load({"LOWTIDE_DECAY_MS=250ms"}).get(Opt::decay_ms) == 250);
  CHECK(load({"LOWTIDE_DECAY_MS=2s"}).get(Opt::decay_ms) == 2000);
  CHECK(load({"LOWTIDE_DECAY_MS= 3 S "}).get(Opt::decay_ms) == 3000);
  CHECK(load({"LOWTIDE_DECAY_MS=3600s"}).get(Opt::decay_ms) == 3'600'000);
  CHECK(load({"LOWTIDE_DECAY_MS=2m"}).get(Opt::decay_ms) == 120'000);
  CHECK(load({"LOWTIDE_DECAY_MS=1h"}).get(Opt::decay_ms) == 3'600'000);
  CHECK(warnings.empty());
  // "1K" was read as 1024 ms by the size parser; "1s" was refused.
  for (const char* bad : {"LOWTIDE_DECAY_MS=1K", "LOWTIDE_DECAY_MS=61m", "LOWTIDE_DECAY_MS=3601s",
                          "LOWTIDE_DECAY_MS=0s", "LOWTIDE_DECAY_MS=1.5s"}) {
    INFO(bad);
    Config c = load({bad});
    CHECK(c.get(Opt::decay_ms) == 500);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("|500ms") != std::string::npos);
  }
  CHECK(load({"LOWTIDE_DECAY_MS=1K"}).get(Opt::decay_ms) != 1024);
  CHECK(warnings[0].find("not a duration") != std::string::npos);
}

namespace {
std::vector<std::string> unknown;
void record_unknown(const char* name, unsigned len, const char* nearest) {
  unknown.push_back(std::string(name, len) + "|" + (nearest ? nearest : "-"));
}
std::vector<std::string> unknown_names(std::vector<const char*> env, bool secure = false) {
  unknown.clear();
  env.push_back(nullptr);
  Config c{};
  load_config(&c, env.data(), secure, nullptr, &record_unknown);
  return unknown;
}
}  // namespace

TEST_CASE("unknown LOWTIDE_ names are reported once each, with the nearest setting") {
  CHECK(unknown_names({"LOWTIDE_STAT=text"}) == std::vector<std::string>{"LOWTIDE_STAT|LOWTIDE_STATS"});
  CHECK(unknown_names({"LOWTIDE_CUTOF=1M", "LOWTIDE_DECAYMS=5", "LOWTIDE_STATS_FLIE=x"}) ==
        std::vector<std::string>{"LOWTIDE_CUTOF|LOWTIDE_CUTOFF", "LOWTIDE_DECAYMS|LOWTIDE_DECAY_MS",
                                 "LOWTIDE_STATS_FLIE|LOWTIDE_STATS_FILE"});
  // Far from every setting: no suggestion. A name longer than any: none.
  CHECK(unknown_names({"LOWTIDE_FROBNICATE=1"}) == std::vector<std::string>{"LOWTIDE_FROBNICATE|-"});
  const std::string longname = "LOWTIDE_" + std::string(100, 'S') + "=1";
  CHECK(unknown_names({longname.c_str()}).size() == 1);
  CHECK(unknown[0].substr(unknown[0].size() - 2) == "|-");
  // Options, tool variables, other prefixes and setuid processes: nothing.
  CHECK(unknown_names({"LOWTIDE_STATS=text", "LOWTIDE_OWNER_PID=1", "LOWTIDE_TEST_LIB=x", "LOWTIDE_BUILD_DIR=b",
                       "LOWTIDEX=1", "XLOWTIDE_STAT=1", "PATH=/bin"})
            .empty());
  CHECK(unknown_names({"LOWTIDE_STAT=text"}, true).empty());
  for (const char* const* t = kToolVariables; *t != nullptr; ++t) CHECK(find_option(*t) == nullptr);
}

TEST_CASE("nearest_option: a misspelling, not anything") {
  CHECK(std::string(nearest_option("LOWTIDE_HUGEPAGE", 16)) == "LOWTIDE_HUGEPAGES");
  CHECK(std::string(nearest_option("LOWTIDE_LIMT", 12)) == "LOWTIDE_LIMIT");
  CHECK(nearest_option("LOWTIDE_COLOUR", 14) == nullptr);
  CHECK(nearest_option("LOWTIDE_", 8) == nullptr);
}

namespace {
std::vector<std::string> duplicates;
void record_duplicate(const char* env, const char* used, const char* ignored) {
  duplicates.push_back(std::string(env) + "|" + used + "|" + ignored);
}
}  // namespace

TEST_CASE("a setting given twice counts by its first entry, as getenv reads it; the later one is reported") {
  std::vector<const char*> env = {"LOWTIDE_CUTOFF=256K", "LOWTIDE_STATS=json", "LOWTIDE_CUTOFF=64K",
                                  "LOWTIDE_CUTOFF=banana", nullptr};
  warnings.clear();
  duplicates.clear();
  Config c{};
  load_config(&c, env.data(), false, &record, nullptr, &record_duplicate);
  CHECK(c.get(Opt::cutoff) == 256 * 1024);
  CHECK(stats_mode(c.get(Opt::stats)) == StatsMode::json);
  CHECK(warnings.empty());  // an ignored later value is not parsed, so not warned about as bad
  REQUIRE(duplicates.size() == 2);
  CHECK(duplicates[0] == "LOWTIDE_CUTOFF|256K|64K");
  CHECK(duplicates[1] == "LOWTIDE_CUTOFF|256K|banana");

  // A bad first value: warned about, the default used, the later valid one still ignored.
  std::vector<const char*> bad_first = {"LOWTIDE_CUTOFF=banana", "LOWTIDE_CUTOFF=64K", nullptr};
  warnings.clear();
  duplicates.clear();
  load_config(&c, bad_first.data(), false, &record, nullptr, &record_duplicate);
  CHECK(c.get(Opt::cutoff) == (std::uint64_t{128} << 10));
  CHECK(warnings.size() == 1);
  REQUIRE(duplicates.size() == 1);
  CHECK(duplicates[0] == "LOWTIDE_CUTOFF|banana|64K");

  // setuid: nothing is read, nothing reported.
  duplicates.clear();
  load_config(&c, env.data(), true, &record, nullptr, &record_duplicate);
  CHECK(c.get(Opt::cutoff) == (std::uint64_t{128} << 10));
  CHECK(duplicates.empty());
}
