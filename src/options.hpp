// Every LOWTIDE_* setting, with its environment name, type, default and
// meaning, in one table (options.cpp). Parsed once, at first-call init,
// straight from the environment block: no allocation, no getenv.
// docs/configuration.md is checked against this table by a unit test.
#pragma once
#include <cstdint>

namespace lowtide {

enum class Opt : unsigned { cutoff, reserve, count };

enum class OptKind { size, choice };

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

struct Config {
  std::uint64_t value[static_cast<unsigned>(Opt::count)];
  std::uint64_t get(Opt o) const { return value[static_cast<unsigned>(o)]; }
};

// Called with (variable, value, reason, default) for each rejected value.
using WarnFn = void (*)(const char* env, const char* value, const char* reason,
                        const char* default_text);

// Fill cfg from an environ-style array. In a setuid/setgid process (secure)
// every LOWTIDE_* variable is ignored.
void load_config(Config* cfg, const char* const* envp, bool secure, WarnFn warn);

}  // namespace lowtide
