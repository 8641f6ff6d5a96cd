// Every LOWTIDE_* setting, with its environment name, type, default and
// meaning, in one table (options.cpp). Parsed once, at first-call init,
// straight from the environment block: no allocation, no getenv.
// docs/configuration.md is checked against this table by a unit test.
#pragma once
#include <cstdint>

namespace lowtide {

enum class Opt : unsigned { cutoff, reserve, stats, stats_file, cache, decay_ms, decay_thread, hugepages, sites, site_sample,
                       limit, cgroup_root, decay_min_ms, sites_python, live, stats_interval, thread_cache,
                       small_trim, populate, count };

// count: a plain whole number; duration: milliseconds, read by
// parse_duration_ms ("500", "500ms", "2s"; no size suffixes).
enum class OptKind { size, choice, text, count, duration };

struct OptionSpec {
  const char* env;           // environment variable name
  OptKind kind;
  const char* default_text;  // as documented and as parsed
  std::uint64_t min, max;    // accepted range (sizes)
  // For OptKind::choice, the words. A size may take one word too (its
  // default, e.g. LOWTIDE_LIMIT's "cgroup"), read as kSizeWord.
  const char* const* choices;
  int nchoices;
  const char* unit;          // the Type column of docs/configuration.md
};

// The value of a size option set to its word rather than a number.
constexpr std::uint64_t kSizeWord = UINT64_MAX;

extern const OptionSpec kOptions[static_cast<unsigned>(Opt::count)];

constexpr unsigned kTextMax = 1024;  // longest text value kept (a path)

struct Config {
  std::uint64_t value[static_cast<unsigned>(Opt::count)];
  char text[static_cast<unsigned>(Opt::count)][kTextMax];  // for OptKind::text
  std::uint64_t get(Opt o) const { return value[static_cast<unsigned>(o)]; }
  const char* str(Opt o) const { return text[static_cast<unsigned>(o)]; }
};

// LOWTIDE_STATS's words, in table order, and what each means.
enum class StatsMode : unsigned { off = 0, text = 1, json = 2, both = 3, prometheus = 4 };
StatsMode stats_mode(std::uint64_t choice_index);

// What the option accepts, for warnings and the docs: "4 KiB to 1 TiB",
// "1 to 3600000", "0 to 4096", "off, 0, on, 1, text, json, both", "1 to 1023
// bytes", "cgroup or 0 B to 64 TiB". Written into buf (NUL-terminated, cut to cap); never allocates.
void describe_valid(const OptionSpec& spec, char* buf, unsigned cap);
// The option whose variable is `env`, or nullptr.
const OptionSpec* find_option(const char* env);

// Called with (variable, value, reason, default) for each rejected value.
using WarnFn = void (*)(const char* env, const char* value, const char* reason,
                        const char* default_text);

// Called with (the entry's name, its length, the nearest option's name or
// nullptr when none is near) for each LOWTIDE_* name in the environment that
// is neither an option nor one of kToolVariables.
using UnknownFn = void (*)(const char* name, unsigned len, const char* nearest);

// LOWTIDE_* names that are not settings of the library but are set or read
// by lowtide's own tools and tests (the launcher, the test harness, the
// report's owner marker): never warned about. nullptr-terminated.
extern const char* const kToolVariables[];

// The option name nearest to name[0, len) by edit distance, if it is near
// enough to be a misspelling (at most a third of the length past
// "LOWTIDE_", and at least 2 edits allowed), else nullptr. No allocation:
// names longer than 64 have none.
const char* nearest_option(const char* name, unsigned len);

// Called with (variable, the value used, a later value ignored) for each
// setting the environment holds more than once.
using DuplicateFn = void (*)(const char* env, const char* used, const char* ignored);

// Fill cfg from an environ-style array. In a setuid/setgid process (secure)
// every LOWTIDE_* variable is ignored, and none is warned about. A variable
// present more than once counts by its first entry, as getenv (and so the
// launcher, Python's os.environ, mimalloc) reads it; the later ones are
// ignored, each reported to `duplicate`.
void load_config(Config* cfg, const char* const* envp, bool secure, WarnFn warn, UnknownFn unknown = nullptr,
                 DuplicateFn duplicate = nullptr);

}  // namespace lowtide
