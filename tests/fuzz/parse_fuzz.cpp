// libFuzzer target for the configuration parsers (src/parse.cpp,
// src/options.cpp), built with clang and ASan+UBSan by scripts/fuzz.
//
// The input is a list of lines. Each line's first byte picks a LOWTIDE_*
// option and the rest is its value; every value also goes through
// parse_size and parse_choice directly. Whatever the bytes, the parsers
// must not crash or read out of bounds (ASan), must not overflow (UBSan),
// and must keep their contracts:
//   - parse_size leaves the output alone unless it returns ok, and what it
//     accepts prints back (format_size) to the same value;
//   - load_config gives every option a value in its documented range, text
//     values NUL-terminated and shorter than kTextMax, and warns at most once
//     per rejected line.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "options.hpp"
#include "parse.hpp"

using namespace lowtide;

namespace {

int g_warnings = 0;
void count_warning(const char*, const char*, const char*, const char*) { ++g_warnings; }

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "parse_fuzz: contract broken: %s\n", what);
  std::abort();
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> entries;
  std::size_t lines = 0;
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
    const OptionSpec& o = kOptions[which];
    if (o.kind == OptKind::choice) {
      const int i = parse_choice(value.c_str(), o.choices, o.nchoices);
      if (i < -1 || i >= o.nchoices) broken("parse_choice index out of range");
    }
    entries.push_back(std::string(o.env) + "=" + value);
  }
  std::vector<const char*> envp;
  for (const std::string& e : entries) envp.push_back(e.c_str());
  envp.push_back(nullptr);

  static Config cfg;
  g_warnings = 0;
  load_config(&cfg, envp.data(), false, &count_warning);
  if (g_warnings > static_cast<int>(lines)) broken("more warnings than lines");
  for (unsigned i = 0; i < static_cast<unsigned>(Opt::count); ++i) {
    const OptionSpec& o = kOptions[i];
    if (std::memchr(cfg.text[i], '\0', kTextMax) == nullptr) broken("text value not NUL-terminated");
    if (o.kind == OptKind::size && (cfg.value[i] < o.min || cfg.value[i] > o.max)) broken("size out of range");
    if (o.kind == OptKind::choice && cfg.value[i] >= static_cast<std::uint64_t>(o.nchoices)) broken("bad choice");
    if (o.kind == OptKind::text && std::strlen(cfg.text[i]) != cfg.value[i]) broken("text length");
  }
  return 0;
}
