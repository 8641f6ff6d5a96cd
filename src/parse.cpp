#include "parse.hpp"

namespace lowtide {

namespace {
char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The decimal digits that start a size or a duration, after blanks: *v
// their value (*overflow if it does not fit), *s just past them. empty for
// nothing but blanks, garbage for no digit first (also a '-' or a '+').
ParseStatus leading_number(const char** sp, std::uint64_t* v, bool* overflow) {
  const char* s = *sp;
  if (s == nullptr) return ParseStatus::empty;
  while (is_space(*s)) ++s;
  if (*s == '\0') return ParseStatus::empty;
  if (*s < '0' || *s > '9') return ParseStatus::garbage;
  while (*s >= '0' && *s <= '9') {
    std::uint64_t d = static_cast<std::uint64_t>(*s - '0');
    if (*v > (UINT64_MAX - d) / 10) *overflow = true;
    else *v = *v * 10 + d;
    ++s;
  }
  *sp = s;
  return ParseStatus::ok;
}
}  // namespace

ParseStatus parse_size(const char* s, std::uint64_t* out) {
  std::uint64_t v = 0;
  bool overflow = false;
  if (ParseStatus st = leading_number(&s, &v, &overflow); st != ParseStatus::ok) return st;
  unsigned shift = 0;
  switch (lower(*s)) {
    case 'k': shift = 10; ++s; break;
    case 'm': shift = 20; ++s; break;
    case 'g': shift = 30; ++s; break;
    case 't': shift = 40; ++s; break;
    default: break;
  }
  if (shift != 0) {
    if (lower(*s) == 'i') {
      ++s;
      if (lower(*s) != 'b') return ParseStatus::garbage;
      ++s;
    } else if (lower(*s) == 'b') {
      ++s;
    }
  } else if (lower(*s) == 'b') {
    ++s;
  }
  while (is_space(*s)) ++s;
  if (*s != '\0') return ParseStatus::garbage;
  if (overflow) return ParseStatus::overflow;
  if (shift != 0 && v > (UINT64_MAX >> shift)) return ParseStatus::overflow;
  *out = v << shift;
  return ParseStatus::ok;
}

ParseStatus parse_duration_ms(const char* s, std::uint64_t* out) {
  std::uint64_t v = 0;
  bool overflow = false;
  if (ParseStatus st = leading_number(&s, &v, &overflow); st != ParseStatus::ok) return st;
  while (is_space(*s)) ++s;
  std::uint64_t scale = 1;
  if (lower(s[0]) == 'm' && lower(s[1]) == 's') {
    s += 2;
  } else if (lower(s[0]) == 's') {
    scale = 1000;
    ++s;
  } else if (lower(s[0]) == 'm') {
    scale = 60'000;
    ++s;
  } else if (lower(s[0]) == 'h') {
    scale = 3'600'000;
    ++s;
  }
  while (is_space(*s)) ++s;
  if (*s != '\0') return ParseStatus::garbage;
  if (overflow || v > UINT64_MAX / scale) return ParseStatus::overflow;
  *out = v * scale;
  return ParseStatus::ok;
}

int parse_choice(const char* s, const char* const* words, int nwords) {
  if (s == nullptr) return -1;
  while (is_space(*s)) ++s;
  for (int i = 0; i < nwords; ++i) {
    const char* a = s;
    const char* b = words[i];
    while (*b != '\0' && lower(*a) == lower(*b)) {
      ++a;
      ++b;
    }
    while (is_space(*a)) ++a;
    if (*b == '\0' && *a == '\0') return i;
  }
  return -1;
}

const char* format_size(std::uint64_t v, char* buf, unsigned cap) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  unsigned u = 0;
  while (u < 4 && v != 0 && (v & 1023) == 0) {
    v >>= 10;
    ++u;
  }
  format_count(v, buf, cap);
  unsigned o = 0;
  while (o + 1 < cap && buf[o] != '\0') ++o;
  const char* unit = units[u];
  if (o + 1 < cap) buf[o++] = ' ';
  while (*unit && o + 1 < cap) buf[o++] = *unit++;
  if (cap) buf[o] = '\0';
  return buf;
}

const char* format_duration_ms(std::uint64_t ms, char* buf, unsigned cap) {
  static const struct {
    std::uint64_t scale;
    const char* unit;
  } kUnits[] = {{3'600'000, " h"}, {60'000, " m"}, {1000, " s"}, {1, " ms"}};
  unsigned u = 0;
  while (u < 3 && (ms == 0 || ms % kUnits[u].scale != 0)) ++u;
  format_count(ms / kUnits[u].scale, buf, cap);
  unsigned o = 0;
  while (o + 1 < cap && buf[o] != '\0') ++o;
  for (const char* t = kUnits[u].unit; *t && o + 1 < cap;) buf[o++] = *t++;
  if (cap) buf[o] = '\0';
  return buf;
}

const char* format_count(std::uint64_t v, char* buf, unsigned cap) {
  char tmp[24];
  unsigned n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  unsigned o = 0;
  while (n > 0 && o + 1 < cap) buf[o++] = tmp[--n];
  if (cap) buf[o] = '\0';
  return buf;
}

}  // namespace lowtide
