// libFuzzer target for the configuration parsers (src/parse.cpp,
// src/options.cpp) and for what the report makes of untrusted bytes
// (src/report_out.cpp, src/report_file.cpp), built with clang and ASan+UBSan
// by scripts/fuzz.
//
// The input is a list of lines. Each line's first byte picks a LOWTIDE_*
// option and the rest is its value; every value also goes through
// parse_size, parse_duration_ms and parse_choice directly, and as the name
// of a LOWTIDE_* variable that is no option (the unknown-name warning and
// its nearest_option). Whatever the bytes, the parsers
// must not crash or read out of bounds (ASan), must not overflow (UBSan),
// and must keep their contracts:
//   - parse_size leaves the output alone unless it returns ok, and what it
//     accepts prints back (format_size) to the same value;
//   - parse_duration_ms the same (format_duration_ms reads back);
//   - nearest_option returns nullptr or an option's name, and load_config
//     reports each name that is not an option once, with its exact length;
//   - load_config gives every option a value in its documented range, text
//     values NUL-terminated and shorter than kTextMax, and warns at most once
//     per rejected line;
//   - every value, as a report path, expands (%p, %%) within kPathMax or is
//     refused, and the expansion is exactly what the pattern says;
//   - every value, as JSON (a command line or thread name in a report), is
//     one well-formed JSON string that is valid UTF-8, and decodes back to
//     the value when the value was valid UTF-8 already.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "options.hpp"
#include "parse.hpp"
#include "report_file.hpp"
#include "report_out.hpp"

using namespace lowtide;

namespace {

int g_warnings = 0;
void count_warning(const char*, const char*, const char*, const char*) { ++g_warnings; }
[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "parse_fuzz: contract broken: %s\n", what);
  std::abort();
}

int g_unknown = 0;
void count_unknown(const char* name, unsigned len, const char* nearest) {
  ++g_unknown;
  if (std::strncmp(name, "LOWTIDE_", 8) != 0 || len < 8) broken("unknown name is not a LOWTIDE_ name");
  if (name[len] != '=' || std::memchr(name, '=', len) != nullptr) broken("unknown name's length is not up to its '='");
  if (nearest != nullptr && find_option(nearest) == nullptr) broken("nearest_option is not an option");
}

void check_duration(const char* s) {
  std::uint64_t v = 0x5A5A5A5A5A5A5A5Aull;
  if (parse_duration_ms(s, &v) != ParseStatus::ok) {
    if (v != 0x5A5A5A5A5A5A5A5Aull) broken("parse_duration_ms wrote its output on failure");
    return;
  }
  char buf[40];
  format_duration_ms(v, buf, sizeof buf);
  std::uint64_t back = 0;
  if (parse_duration_ms(buf, &back) != ParseStatus::ok || back != v) broken("format_duration_ms does not read back");
}

void check_size(const char* s) {
  std::uint64_t v = 0x5A5A5A5A5A5A5A5Aull;
  const ParseStatus st = parse_size(s, &v);
  if (st != ParseStatus::ok) {
    if (v != 0x5A5A5A5A5A5A5A5Aull) broken("parse_size wrote its output on failure");
    return;
  }
  char buf[40];
  format_size(v, buf, sizeof buf);
  std::string squeezed;
  for (const char* c = buf; *c; ++c)
    if (*c != ' ') squeezed += *c;
  std::uint64_t back = 0;
  if (parse_size(squeezed.c_str(), &back) != ParseStatus::ok || back != v) broken("format_size does not read back");
}

// The expansion, computed the obvious way.
void check_path(const std::string& pattern) {
  static char out[report::kPathMax];
  std::string want;
  const std::string pid = std::to_string(getpid());
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      want += pid;
      ++i;
    } else if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == '%') {
      want += '%';
      ++i;
    } else {
      want += pattern[i];
    }
  }
  const bool ok = report::expand_path(pattern.c_str(), out);
  if (ok != (want.size() < report::kPathMax)) broken("expand_path refuses what fits, or accepts what does not");
  if (ok && want != out) broken("expand_path expands wrongly");
}

// Length of the well-formed UTF-8 sequence at s, or 0 (a second,
// independent reading of RFC 3629 to check the report's).
std::size_t utf8_len(const unsigned char* s, std::size_t left) {
  std::uint32_t cp;
  std::size_t n;
  if (s[0] < 0x80) return 1;
  if ((s[0] & 0xe0) == 0xc0) n = 2, cp = s[0] & 0x1f;
  else if ((s[0] & 0xf0) == 0xe0) n = 3, cp = s[0] & 0x0f;
  else if ((s[0] & 0xf8) == 0xf0) n = 4, cp = s[0] & 0x07;
  else return 0;
  if (left < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  const std::uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

bool valid_utf8(const std::string& v) {
  const auto* s = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size();) {
    std::size_t k = utf8_len(s + i, v.size() - i);
    if (k == 0) return false;
    i += k;
  }
  return true;
}

void put_utf8(std::string* out, std::uint32_t cp) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

void check_json(const std::string& v) {
  static char buf[1 << 16];
  report::Out o(buf, sizeof buf);
  o.json_string(v.data(), v.size());
  if (o.full()) return;  // cut at a line: the report rewrites such JSON as truncated
  const std::string j(o.data(), o.size());
  if (!valid_utf8(j)) broken("json_string wrote invalid UTF-8");
  if (j.size() < 2 || j.front() != '"' || j.back() != '"') broken("json_string is not one quoted string");
  std::string decoded;
  for (std::size_t i = 1; i + 1 < j.size(); ++i) {
    const auto c = static_cast<unsigned char>(j[i]);
    if (c < 0x20 || c == '"') broken("json_string left a control character or quote raw");
    if (c != '\\') {
      decoded += j[i];
      continue;
    }
    if (i + 2 >= j.size()) broken("json_string ends in an escape");
    const char e = j[++i];
    if (e == '"' || e == '\\') {
      decoded += e;
    } else if (e == 'u') {
      if (i + 5 >= j.size()) broken("short \\u escape");
      std::uint32_t cp = 0;
      for (int k = 0; k < 4; ++k) {
        const char h = j[++i];
        if (!std::isxdigit(static_cast<unsigned char>(h))) broken("bad \\u escape");
        cp = cp * 16 + static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      if (cp >= 0xd800 && cp <= 0xdfff) broken("json_string escaped a surrogate");
      put_utf8(&decoded, cp);
    } else {
      broken("json_string wrote an unknown escape");
    }
  }
  if (valid_utf8(v) && decoded != v) broken("valid UTF-8 does not decode back to itself");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> entries;
  std::size_t lines = 0;
  int unknown_lines = 0;
  for (std::size_t at = 0; at <= in.size();) {
    std::size_t nl = in.find('\n', at);
    if (nl == std::string::npos) nl = in.size();
    std::string line = in.substr(at, nl - at);
    at = nl + 1;
    if (line.empty()) continue;
    ++lines;
    const unsigned which = static_cast<unsigned char>(line[0]) % static_cast<unsigned>(Opt::count);
    std::string value = line.substr(1);
    value = value.substr(0, std::strlen(value.c_str()));  // an environment string ends at its first NUL
    check_size(value.c_str());
    check_duration(value.c_str());
    check_path(value);
    check_json(line.substr(1));  // all bytes, NULs too
    const OptionSpec& o = kOptions[which];
    if (o.kind == OptKind::choice) {
      const int i = parse_choice(value.c_str(), o.choices, o.nchoices);
      if (i < -1 || i >= o.nchoices) broken("parse_choice index out of range");
    }
    entries.push_back(std::string(o.env) + "=" + value);
    // The value as a variable's name: not an option unless it spells one.
    const std::string name = "LOWTIDE_" + value.substr(0, value.find('='));
    if (find_option(name.c_str()) == nullptr) {
      const char* near = nearest_option(name.c_str(), static_cast<unsigned>(name.size()));
      if (near != nullptr && find_option(near) == nullptr) broken("nearest_option is not an option");
      entries.push_back(name + "=1");
      ++unknown_lines;
    }
  }
  std::vector<const char*> envp;
  for (const std::string& e : entries) envp.push_back(e.c_str());
  envp.push_back(nullptr);

  static Config cfg;
  g_warnings = 0;
  g_unknown = 0;
  load_config(&cfg, envp.data(), false, &count_warning, &count_unknown);
  if (g_warnings > static_cast<int>(lines)) broken("more warnings than lines");
  // Tool variables (kToolVariables) are not reported: at most one per line.
  if (g_unknown > unknown_lines) broken("more unknown names reported than were set");
  for (unsigned i = 0; i < static_cast<unsigned>(Opt::count); ++i) {
    const OptionSpec& o = kOptions[i];
    if (std::memchr(cfg.text[i], '\0', kTextMax) == nullptr) broken("text value not NUL-terminated");
    // A size or duration option with a word (LOWTIDE_LIMIT's "cgroup",
    // LOWTIDE_STATS_INTERVAL's "off") may hold kSizeWord.
    const bool word = (o.kind == OptKind::size || o.kind == OptKind::duration) && o.nchoices != 0 &&
                      cfg.value[i] == kSizeWord;
    if (o.kind == OptKind::size && !word && (cfg.value[i] < o.min || cfg.value[i] > o.max)) broken("size out of range");
    if (o.kind == OptKind::duration && !word && (cfg.value[i] < o.min || cfg.value[i] > o.max))
      broken("duration out of range");
    if (o.kind == OptKind::choice && cfg.value[i] >= static_cast<std::uint64_t>(o.nchoices)) broken("bad choice");
    if (o.kind == OptKind::text && std::strlen(cfg.text[i]) != cfg.value[i]) broken("text length");
  }
  return 0;
}
