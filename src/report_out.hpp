// Memory and output for one report, without malloc and without exceptions.
//
// A report can be written from places where lowtide's own allocator must not
// be entered: an _exit() called from a signal handler that interrupted a
// malloc holding the reuse cache's or the arena's lock, exit() racing other
// threads, a process out of memory. So nothing in the report allocates
// through malloc: its tables and its text live in a Scratch region mapped
// for the report alone (lazily committed, unmapped after), or, when even
// that mapping is refused (RLIMIT_AS, ENOMEM), in a fixed static buffer, with
// fewer rows and a "truncated" mark. Output goes into an Out, which never
// grows: what does not fit is cut at a line boundary and marked.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fmt/format.h>

namespace lowtide::report {

class Scratch {
 public:
  // Maps `reserve` bytes (MAP_NORESERVE: only touched pages cost memory);
  // falls back to [fallback, fallback + fallback_len) when that fails.
  Scratch(std::size_t reserve, char* fallback, std::size_t fallback_len) noexcept;
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // Up to `want` zeroed elements of T (never more than half of what is left,
  // so the output always keeps room), at least one unless nothing is left.
  // *got says how many; nullptr when none.
  template <typename T>
  T* take(std::size_t want, std::size_t* got) noexcept {
    void* p = take_bytes(want, sizeof(T), alignof(T), got);
    return static_cast<T*>(p);
  }
  // Everything that is left, for the output.
  char* rest(std::size_t* len) noexcept;
  bool on_fallback() const { return !mapped_; }

 private:
  void* take_bytes(std::size_t want, std::size_t size, std::size_t align, std::size_t* got) noexcept;
  char* base_ = nullptr;
  std::size_t cap_ = 0, used_ = 0;
  bool mapped_ = false;
};

// A string from outside the library (a command line, a thread name, a
// module, source or Python file name, a function name) in the text report:
// bytes below 0x20 and 0x7f, and the C1 controls U+0080-U+009F in UTF-8,
// are shown as '?', so that a name cannot move a
// terminal's cursor, recolour it, or forge report lines with a newline.
// (The JSON report escapes them, and Prometheus labels likewise.)
struct Shown {
  const char* s;
  std::size_t n;
  explicit Shown(const char* p) noexcept : s(p), n(std::strlen(p)) {}
  Shown(const char* p, std::size_t len) noexcept : s(p), n(len) {}
};

// A size in human units, e.g. "1.2 GiB", "512 B", formatted into the object.
struct Human {
  char s[40];
  explicit Human(double v) noexcept;
  operator fmt::string_view() const { return fmt::string_view(s); }
};

class Out {
 public:
  Out(char* buf, std::size_t cap) noexcept;

  template <typename... Args>
  void put(fmt::format_string<Args...> f, Args&&... args) noexcept {
    if (full_) return;
    std::size_t room = cap_ - len_;
    // The format strings are checked at compile time and nothing here
    // allocates, so fmt has nothing to throw (lowtide is built without
    // exceptions; src/meson.build makes fmt's FMT_THROW an abort). fmt's
    // digit buffers would allocate (operator new, which throws on failure,
    // through frames without cleanups) only for precisions far beyond the
    // ones formatted here (at most {:.3f}, of bounded values).
    auto r = fmt::format_to_n(buf_ + len_, room, f, std::forward<Args>(args)...);
    if (r.size > room) overflow();
    else len_ += r.size;
  }
  void raw(const char* s, std::size_t n) noexcept;
  void raw(const char* s) noexcept { raw(s, std::strlen(s)); }
  // A JSON string: quoted; '"', '\\' and control bytes escaped; bytes that
  // are not well-formed UTF-8 written as \u00XX (their Latin-1 reading), so
  // that a strict parser accepts every report.
  void json_string(const char* s, std::size_t n) noexcept;
  void json_string(const char* s) noexcept { json_string(s, std::strlen(s)); }

  std::size_t size() const { return len_; }
  const char* data() const { return buf_; }
  bool full() const { return full_; }
  // Back to an earlier size (a section that did not fit is dropped whole).
  void rewind(std::size_t mark) noexcept {
    len_ = mark < len_ ? mark : len_;
    full_ = false;
  }
  // Room kept back from every put(), so that a closing line always fits.
  static constexpr std::size_t kTail = 256;
  // Lets the closing line use the room kept back.
  void finish_with(const char* s) noexcept;

 private:
  void overflow() noexcept;  // cut back to the last full line, mark full
  char* buf_;
  std::size_t cap_, len_ = 0, real_cap_;
  bool full_ = false;
};

}  // namespace lowtide::report

template <>
struct fmt::formatter<lowtide::report::Shown> {
  constexpr auto parse(format_parse_context& ctx) { return ctx.begin(); }
  template <typename Ctx>
  auto format(const lowtide::report::Shown& v, Ctx& ctx) const {
    auto out = ctx.out();
    for (std::size_t i = 0; i < v.n; ++i) {
      const auto c = static_cast<unsigned char>(v.s[i]);
      // U+0080-U+009F in UTF-8 (0xc2 0x80-0x9f): the C1 controls, which
      // UTF-8 terminals (xterm, VTE) act on as ESC-sequences (U+009B: CSI).
      if (c == 0xc2 && i + 1 < v.n && (static_cast<unsigned char>(v.s[i + 1]) & 0xe0) == 0x80) {
        *out++ = '?';
        ++i;
        continue;
      }
      *out++ = (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
    }
    return out;
  }
};
