#include "options.hpp"

#include "parse.hpp"

namespace lowtide {

const OptionSpec kOptions[static_cast<unsigned>(Opt::count)] = {
    {"LOWTIDE_CUTOFF", OptKind::size, "1MiB", 4096, std::uint64_t{1} << 40, nullptr, 0,
     "Blocks of at least this size take the large path (own mapping, pages "
     "returned to the OS at free); smaller ones go to mimalloc."},
    {"LOWTIDE_RESERVE", OptKind::size, "1TiB", std::uint64_t{64} << 20, std::uint64_t{64} << 40,
     nullptr, 0,
     "Address space reserved at start-up for large blocks (PROT_NONE, no memory "
     "committed). Halved until it fits under ulimit -v; when it cannot be had "
     "or fills up, large blocks go to mimalloc."},
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

bool parse_one(const OptionSpec& spec, const char* text, std::uint64_t* out, const char** reason) {
  if (spec.kind == OptKind::choice) {
    int i = parse_choice(text, spec.choices, spec.nchoices);
    if (i < 0) {
      *reason = "is not one of the accepted values";
      return false;
    }
    *out = static_cast<std::uint64_t>(i);
    return true;
  }
  std::uint64_t v = 0;
  switch (parse_size(text, &v)) {
    case ParseStatus::ok: break;
    case ParseStatus::empty: *reason = "is empty"; return false;
    case ParseStatus::garbage: *reason = "is not a size (e.g. 1M, 512KiB, 1048576)"; return false;
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

}  // namespace

void load_config(Config* cfg, const char* const* envp, bool secure, WarnFn warn) {
  for (unsigned i = 0; i < static_cast<unsigned>(Opt::count); ++i) {
    const char* reason = nullptr;
    std::uint64_t v = 0;
    [[maybe_unused]] bool ok = parse_one(kOptions[i], kOptions[i].default_text, &v, &reason);
    cfg->value[i] = v;
  }
  if (secure || envp == nullptr) return;
  for (const char* const* e = envp; *e != nullptr; ++e) {
    const char* entry = *e;
    if (entry[0] != 'L' || entry[1] != 'O' || entry[2] != 'W') continue;
    for (unsigned i = 0; i < static_cast<unsigned>(Opt::count); ++i) {
      const char* text = match(entry, kOptions[i].env);
      if (text == nullptr) continue;
      const char* reason = nullptr;
      std::uint64_t v = 0;
      if (parse_one(kOptions[i], text, &v, &reason)) {
        cfg->value[i] = v;
      } else if (warn != nullptr) {
        warn(kOptions[i].env, text, reason, kOptions[i].default_text);
      }
    }
  }
}

}  // namespace lowtide
