#include "options.hpp"

#include "parse.hpp"

namespace lowtide {

namespace {
const char* const kStatsWords[] = {"off", "0", "on", "1", "text", "json", "both", "prometheus"};
const char* const kOnOff[] = {"on", "off"};
const char* const kHugeWords[] = {"on", "off", "advise"};
const char* const kCgroup[] = {"cgroup"};
const char* const kOff[] = {"off"};
const char* const kAuto[] = {"auto"};
}

StatsMode stats_mode(std::uint64_t i) {
  switch (i) {
    case 2: case 3: case 4: return StatsMode::text;
    case 5: return StatsMode::json;
    case 6: return StatsMode::both;
    case 7: return StatsMode::prometheus;
    default: return StatsMode::off;
  }
}

const OptionSpec kOptions[static_cast<unsigned>(Opt::count)] = {
    {"LOWTIDE_CUTOFF", OptKind::size, "128KiB", 4096, std::uint64_t{1} << 40, nullptr, 0, "size"},
    {"LOWTIDE_RESERVE", OptKind::size, "1TiB", std::uint64_t{64} << 20, std::uint64_t{64} << 40,
     nullptr, 0, "size"},
    {"LOWTIDE_STATS", OptKind::choice, "off", 0, 0, kStatsWords, 8, "choice"},
    {"LOWTIDE_STATS_FILE", OptKind::text, "stderr", 0, kTextMax - 1, nullptr, 0, "path"},
    // "auto" (kSizeWord): cache::auto_cap of the machine's RAM.
    {"LOWTIDE_CACHE", OptKind::size, "auto", 0, std::uint64_t{1} << 40, kAuto, 1, "size"},
    {"LOWTIDE_DECAY_MS", OptKind::duration, "500ms", 1, 3'600'000, nullptr, 0, "duration"},
    {"LOWTIDE_DECAY_THREAD", OptKind::choice, "on", 0, 0, kOnOff, 2, "choice"},
    {"LOWTIDE_HUGEPAGES", OptKind::choice, "on", 0, 0, kHugeWords, 3, "choice"},
    {"LOWTIDE_SITES", OptKind::count, "0", 0, 4096, nullptr, 0, "count"},
    {"LOWTIDE_SITE_SAMPLE", OptKind::size, "2MiB", 0, std::uint64_t{1} << 30, nullptr, 0, "size"},
    {"LOWTIDE_LIMIT", OptKind::size, "cgroup", 0, std::uint64_t{64} << 40, kCgroup, 1, "size"},
    // For tests: where /proc/self/cgroup and the cgroup mounts are looked for.
    {"LOWTIDE_CGROUP_ROOT", OptKind::text, "/", 0, kTextMax - 1, nullptr, 0, "path"},
    {"LOWTIDE_DECAY_MIN_MS", OptKind::duration, "50ms", 1, 3'600'000, nullptr, 0, "duration"},
    {"LOWTIDE_SITES_PYTHON", OptKind::choice, "on", 0, 0, kOnOff, 2, "choice"},
    {"LOWTIDE_LIVE", OptKind::choice, "on", 0, 0, kOnOff, 2, "choice"},
    // Milliseconds; "off" (kSizeWord) = no periodic report.
    {"LOWTIDE_STATS_INTERVAL", OptKind::duration, "off", 100, 86'400'000, kOff, 1, "duration"},
    // Bytes per size class a thread keeps of its freed small blocks.
    {"LOWTIDE_THREAD_CACHE", OptKind::size, "16KiB", 0, std::uint64_t{64} << 10, nullptr, 0, "size"},
    // A live thread's trim of its freed small-block memory (small::trim_own).
    {"LOWTIDE_SMALL_TRIM", OptKind::choice, "on", 0, 0, kOnOff, 2, "choice"},
    // Percent of a realloc's new fresh pages faulted in at the realloc
    // (LargePath::populate_tail).
    {"LOWTIDE_POPULATE", OptKind::count, "50", 0, 100, nullptr, 0, "count"},
};

const char* const kToolVariables[] = {
    "LOWTIDE_OWNER_PID",            // set by the library itself (report.cpp): who reports
    "LOWTIDE_BUILD_DIR",            // the launcher, scripts/demo, tests: which build
    "LOWTIDE_PEER_LIBDIR",          // lowtide compare: where the peer allocators are
    "LOWTIDE_TEST_LIB",             // tests: the library under test
    "LOWTIDE_SOURCE_ROOT",          // tests: the source tree
    "LOWTIDE_REAL_PYTHON_MODULES",  // tests/programs
    "LOWTIDE_FUZZ_SECONDS",         // scripts/fuzz
    "LOWTIDE_QUICK",                // scripts/test
    "LOWTIDE_LINT_ROOT",            // scripts/lint
    "LOWTIDE_LINT_LAYERS_ONLY",     // scripts/lint
    nullptr,
};

namespace {

// Compare "NAME=" against an environment entry without allocating.
const char* match(const char* entry, const char* name) {
  while (*name != '\0') {
    if (*entry != *name) return nullptr;
    ++entry;
    ++name;
  }
  return *entry == '=' ? entry + 1 : nullptr;
}

bool parse_text(const OptionSpec& spec, const char* text, std::uint64_t* out, const char** reason) {
  std::uint64_t n = 0;
  while (text[n] != '\0') ++n;
  if (n == 0) {
    *reason = "is empty";
    return false;
  }
  if (n > spec.max) {
    *reason = "is too long";
    return false;
  }
  *out = n;
  return true;
}

// A size, a plain count or a duration in milliseconds, within [min, max].
bool parse_number(const OptionSpec& spec, const char* text, std::uint64_t* out, const char** reason) {
  const bool count = spec.kind == OptKind::count;
  if (count) {
    // parse_size would read "1K" as 1024: a count takes digits only, and
    // the blanks parse_size allows around them (a trailing tab or newline
    // too, as every other setting).
    for (const char* c = text; *c != '\0'; ++c) {
      if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r' && (*c < '0' || *c > '9')) {
        *reason = "is not a whole number";
        return false;
      }
    }
  }
  std::uint64_t v = 0;
  const bool duration = spec.kind == OptKind::duration;
  switch (duration ? parse_duration_ms(text, &v) : parse_size(text, &v)) {
    case ParseStatus::ok: break;
    case ParseStatus::empty: *reason = "is empty"; return false;
    case ParseStatus::garbage:
      // A count's garbage here is digits with blanks between ("1 2"): not
      // a size's reason, whose examples a count does not take.
      *reason = count      ? "is not a whole number"
                : duration ? "is not a duration (e.g. 500ms, 10s, 2m; a bare number is milliseconds)"
                           : "is not a size (e.g. 1M, 512KiB, 1048576)";
      return false;
    case ParseStatus::overflow: *reason = "is too large"; return false;
  }
  if (v < spec.min) {
    *reason = "is below the minimum";
    return false;
  }
  if (v > spec.max) {
    *reason = "is above the maximum";
    return false;
  }
  *out = v;
  return true;
}

bool parse_one(const OptionSpec& spec, const char* text, std::uint64_t* out, const char** reason) {
  switch (spec.kind) {
    case OptKind::text: return parse_text(spec, text, out, reason);
    case OptKind::choice: {
      int i = parse_choice(text, spec.choices, spec.nchoices);
      if (i < 0) {
        *reason = "is not one of the accepted values";
        return false;
      }
      *out = static_cast<std::uint64_t>(i);
      return true;
    }
    case OptKind::size:
    case OptKind::duration:
      if (spec.nchoices != 0 && parse_choice(text, spec.choices, spec.nchoices) >= 0) {
        *out = kSizeWord;
        return true;
      }
      return parse_number(spec, text, out, reason);
    case OptKind::count: return parse_number(spec, text, out, reason);
  }
  return false;
}

void copy_text(Config* cfg, unsigned i, const char* text) {
  unsigned n = 0;
  if (kOptions[i].kind == OptKind::text)
    for (; text[n] != '\0' && n + 1 < kTextMax; ++n) cfg->text[i][n] = text[n];
  cfg->text[i][n] = '\0';
}

}  // namespace

void describe_valid(const OptionSpec& spec, char* buf, unsigned cap) {
  if (cap == 0) return;
  unsigned n = 0;
  auto put = [&](const char* t) {
    while (*t != '\0' && n + 1 < cap) buf[n++] = *t++;
  };
  char a[32], b[32];
  switch (spec.kind) {
    case OptKind::choice:
      for (int i = 0; i < spec.nchoices; ++i) {
        if (i != 0) put(", ");
        put(spec.choices[i]);
      }
      break;
    case OptKind::text:
      put("1 to ");
      put(format_count(spec.max, a, sizeof a));
      put(" bytes");
      break;
    case OptKind::duration:
      if (spec.nchoices != 0) {
        put(spec.choices[0]);
        put(" or ");
      }
      put(format_duration_ms(spec.min, a, sizeof a));
      put(" to ");
      put(format_duration_ms(spec.max, b, sizeof b));
      break;
    case OptKind::size:
    case OptKind::count: {
      // Byte sizes in binary units; counts as digits.
      const bool bytes = spec.kind == OptKind::size;
      if (spec.kind == OptKind::size && spec.nchoices != 0) {
        put(spec.choices[0]);
        put(" or ");
      }
      auto show = [&](std::uint64_t v, char* buf, unsigned n) {
        return bytes ? format_size(v, buf, n) : format_count(v, buf, n);
      };
      put(show(spec.min, a, sizeof a));
      put(" to ");
      put(show(spec.max, b, sizeof b));
      break;
    }
  }
  buf[n] = '\0';
}

const OptionSpec* find_option(const char* env) {
  for (const OptionSpec& o : kOptions) {
    const char* a = o.env;
    const char* b = env;
    while (*a != '\0' && *a == *b) ++a, ++b;
    if (*a == '\0' && *b == '\0') return &o;
  }
  return nullptr;
}

const char* nearest_option(const char* name, unsigned len) {
  // Levenshtein distance, one row at a time, on the stack.
  constexpr unsigned kMax = 64;
  if (len > kMax) return nullptr;
  const char* best = nullptr;
  unsigned best_d = kMax + 1;
  for (const OptionSpec& o : kOptions) {
    unsigned m = 0;
    while (o.env[m] != '\0') ++m;
    if (m > kMax) continue;
    unsigned row[kMax + 1];
    for (unsigned j = 0; j <= m; ++j) row[j] = j;
    for (unsigned i = 1; i <= len; ++i) {
      unsigned diag = row[0];
      row[0] = i;
      for (unsigned j = 1; j <= m; ++j) {
        const unsigned up = row[j];
        const unsigned sub = diag + (name[i - 1] == o.env[j - 1] ? 0 : 1);
        unsigned v = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
        row[j] = sub < v ? sub : v;
        diag = up;
      }
    }
    if (row[m] < best_d) {
      best_d = row[m];
      best = o.env;
    }
  }
  // Compared past the common "LOWTIDE_": a third of the rest, at least 2.
  const unsigned rest = len > 8 ? len - 8 : 0;
  const unsigned limit = rest / 3 > 2 ? rest / 3 : 2;
  return best_d <= limit ? best : nullptr;
}

namespace {
bool is_tool_variable(const char* name, unsigned len) {
  for (const char* const* t = kToolVariables; *t != nullptr; ++t) {
    unsigned i = 0;
    while (i < len && (*t)[i] == name[i]) ++i;
    if (i == len && (*t)[i] == '\0') return true;
  }
  return false;
}
}  // namespace

void load_config(Config* cfg, const char* const* envp, bool secure, WarnFn warn, UnknownFn unknown,
                 DuplicateFn duplicate) {
  for (unsigned i = 0; i < static_cast<unsigned>(Opt::count); ++i) {
    const char* reason = nullptr;
    std::uint64_t v = 0;
    [[maybe_unused]] bool ok = parse_one(kOptions[i], kOptions[i].default_text, &v, &reason);
    cfg->value[i] = v;
    copy_text(cfg, i, kOptions[i].default_text);
  }
  if (secure || envp == nullptr) return;
  // Each option's first entry: a later one is ignored (getenv's reading;
  // before, the last won, so `lowtide run` and the program saw one value
  // and the library obeyed another).
  const char* first[static_cast<unsigned>(Opt::count)] = {};
  for (const char* const* e = envp; *e != nullptr; ++e) {
    const char* entry = *e;
    if (entry[0] != 'L' || entry[1] != 'O' || entry[2] != 'W') continue;
    bool known = false;
    for (unsigned i = 0; i < static_cast<unsigned>(Opt::count); ++i) {
      const char* text = match(entry, kOptions[i].env);
      if (text == nullptr) continue;
      known = true;
      if (first[i] != nullptr) {
        if (duplicate != nullptr) duplicate(kOptions[i].env, first[i], text);
        continue;
      }
      first[i] = text;
      const char* reason = nullptr;
      std::uint64_t v = 0;
      if (parse_one(kOptions[i], text, &v, &reason)) {
        cfg->value[i] = v;
        copy_text(cfg, i, text);
      } else if (warn != nullptr) {
        warn(kOptions[i].env, text, reason, kOptions[i].default_text);
      }
    }
    if (known || unknown == nullptr) continue;
    const char* prefix = "LOWTIDE_";
    unsigned n = 0;
    while (prefix[n] != '\0' && entry[n] == prefix[n]) ++n;
    if (prefix[n] != '\0') continue;
    while (entry[n] != '\0' && entry[n] != '=') ++n;
    if (!is_tool_variable(entry, n)) unknown(entry, n, nearest_option(entry, n));
  }
}

}  // namespace lowtide
