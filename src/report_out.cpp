#include "report_out.hpp"

#include "platform.hpp"
#include "size_math.hpp"

namespace lowtide::report {

Scratch::Scratch(std::size_t reserve, char* fallback, std::size_t fallback_len) noexcept {
  void* m = pal::map_lazy(reserve);
  if (m != nullptr) {
    base_ = static_cast<char*>(m);
    cap_ = reserve;
    mapped_ = true;
  } else {
    base_ = fallback;
    cap_ = fallback_len;
  }
}

Scratch::~Scratch() {
  if (mapped_) pal::unmap(base_, cap_);
}

void* Scratch::take_bytes(std::size_t want, std::size_t size, std::size_t align, std::size_t* got) noexcept {
  std::size_t at = round_up(used_, align);
  std::size_t left = at < cap_ ? cap_ - at : 0;
  std::size_t n = (left / 2) / size;
  if (n > want) n = want;
  *got = n;
  if (n == 0) return nullptr;
  char* p = base_ + at;
  used_ = at + n * size;
  // Fresh mapped pages are zero; the static fallback may hold an earlier
  // report's bytes.
  if (!mapped_) std::memset(p, 0, n * size);
  return p;
}

char* Scratch::rest(std::size_t* len) noexcept {
  std::size_t at = round_up(used_, 16);
  *len = at < cap_ ? cap_ - at : 0;
  used_ = cap_;
  return base_ + at;
}

Human::Human(double v) noexcept {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  bool neg = v < 0;
  if (neg) v = -v;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  s[0] = '\0';
  // As in Out::put: checked formats into a fixed buffer, nothing to throw.
  auto r = u == 0 ? fmt::format_to_n(s, sizeof s - 1, "{}{:.0f} B", neg ? "-" : "", v)
                  : fmt::format_to_n(s, sizeof s - 1, "{}{:.1f} {}", neg ? "-" : "", v, units[u]);
  s[r.size < sizeof s - 1 ? r.size : sizeof s - 1] = '\0';
}

Out::Out(char* buf, std::size_t cap) noexcept
    : buf_(buf), cap_(cap > kTail ? cap - kTail : 0), real_cap_(cap) {}

void Out::raw(const char* s, std::size_t n) noexcept {
  if (full_) return;
  if (n > cap_ - len_) {
    overflow();
    return;
  }
  std::memcpy(buf_ + len_, s, n);
  len_ += n;
}

void Out::overflow() noexcept {
  while (len_ > 0 && buf_[len_ - 1] != '\n') --len_;
  full_ = true;
}

void Out::finish_with(const char* s) noexcept {
  std::size_t n = std::strlen(s);
  if (n > real_cap_ - len_) n = real_cap_ - len_;
  std::memcpy(buf_ + len_, s, n);
  len_ += n;
}

namespace {

// Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlongs, no
// surrogates, nothing past U+10FFFF), or 0.
std::size_t utf8_length(const unsigned char* s, std::size_t left) {
  unsigned char c = s[0];
  std::size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // bounds of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (left < n || s[1] < lo || s[1] > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return n;
}

}  // namespace

void Out::json_string(const char* str, std::size_t n) noexcept {
  const auto* s = reinterpret_cast<const unsigned char*>(str);
  raw("\"", 1);
  std::size_t i = 0;
  while (i < n && !full_) {
    unsigned char c = s[i];
    std::size_t k = 0;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', static_cast<char>(c)};
      raw(e, 2);
      ++i;
    } else if (c >= 0x20 && c < 0x7f) {
      // A run of plain ASCII in one copy.
      std::size_t j = i;
      while (j < n && s[j] >= 0x20 && s[j] < 0x7f && s[j] != '"' && s[j] != '\\') ++j;
      raw(str + i, j - i);
      i = j;
    } else if (c >= 0x80 && (k = utf8_length(s + i, n - i)) != 0) {
      raw(str + i, k);
      i += k;
    } else {
      // A control character, DEL, or a byte that is not well-formed UTF-8.
      put("\\u{:04x}", static_cast<unsigned>(c));
      ++i;
    }
  }
  raw("\"", 1);
}

}  // namespace lowtide::report
