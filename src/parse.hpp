// Parsing of configuration values. Pure functions (no globals, no
// allocation) so they are unit-tested on their own and safe in early init.
#pragma once
#include <cstdint>

namespace lowtide {

enum class ParseStatus { ok, empty, garbage, overflow };

// A byte size: decimal digits with an optional suffix K/M/G/T, optionally
// followed by "B" or "iB" (all binary: 1K = 1KB = 1KiB = 1024), any case,
// surrounding spaces allowed. "1M", "1MiB", "512K", "1048576".
ParseStatus parse_size(const char* s, std::uint64_t* out);

// A duration in milliseconds: decimal digits with an optional unit "ms" or
// "s" (any case, spaces allowed before it and around the value); a bare
// number is milliseconds. "500", "500ms", "2s", "2 S". Size suffixes
// ("1K") are garbage here: a duration of "1K" means nothing.
ParseStatus parse_duration_ms(const char* s, std::uint64_t* out);

// A choice among words: returns the index of the matching word (case
// insensitive) or -1.
int parse_choice(const char* s, const char* const* words, int nwords);

// Format a size the way parse_size reads it back (e.g. "1 MiB", "512 KiB",
// "1000 B") into buf; returns buf.
const char* format_size(std::uint64_t v, char* buf, unsigned cap);
// A duration the way parse_duration_ms reads it back: whole seconds as
// "N s", anything else as "N ms".
const char* format_duration_ms(std::uint64_t ms, char* buf, unsigned cap);
// v in decimal digits into buf (NUL-terminated, cut to cap); returns buf.
const char* format_count(std::uint64_t v, char* buf, unsigned cap);

}  // namespace lowtide
