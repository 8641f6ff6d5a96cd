// Every LOWTIDE_* setting, with its environment name, type, default and
// meaning, in one table (options.cpp). Parsed once, at first-call init,
// straight from the environment block: no allocation, no getenv.
// docs/configuration.md is checked against this table by a unit test.
#pragma once
#include <cstdint>

namespace lowtide {

enum class Opt : unsigned { cutoff, reserve, stats, stats_file, cache, decay_ms, decay_thread, hugepages, sites, site_sample,
                       count };

enum class OptKind { size, choice, text, count };  // count: a plain whole number

struct OptionSpec {
  const char* env;           // environment variable name
  OptKind kind;
  const char* default_text;  // as documented and as parsed
  std::uint64_t min, max;    // accepted range (sizes)
  const char* const* choices;  // for OptKind::choice
  int nchoices;
  const char* help;          // one line for docs/configuration.md
};

extern const OptionSpec kOptions[static_cast<unsigned>(Opt::count)];

constexpr unsigned kTextMax = 1024;  // longest text value kept (a path)

struct Config {
  std::uint64_t value[static_cast<unsigned>(Opt::count)];
  char text[static_cast<unsigned>(Opt::count)][kTextMax];  // for OptKind::text
  std::uint64_t get(Opt o) const { return value[static_cast<unsigned>(o)]; }
  const char* str(Opt o) const { return text[static_cast<unsigned>(o)]; }
};

// LOWTIDE_STATS's words, in table order, and what each means.
enum class StatsMode : unsigned { off = 0, text = 1, json = 2, both = 3 };
StatsMode stats_mode(std::uint64_t choice_index);

// Called with (variable, value, reason, default) for each rejected value.
using WarnFn = void (*)(const char* env, const char* value, const char* reason,
                        const char* default_text);

// Fill cfg from an environ-style array. In a setuid/setgid process (secure)
// every LOWTIDE_* variable is ignored.
void load_config(Config* cfg, const char* const* envp, bool secure, WarnFn warn);

}  // namespace lowtide
