// Messages to stderr that never allocate: formatted into a stack buffer with
// fmt::format_to_n and written with one write(2).
#pragma once
#include <fmt/format.h>

#include "platform.hpp"

namespace lowtide::log {

template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  char buf[512];
  const char prefix[] = "lowtide: warning: ";
  constexpr std::size_t plen = sizeof prefix - 1;
  __builtin_memcpy(buf, prefix, plen);
  auto r = fmt::format_to_n(buf + plen, sizeof buf - plen - 1, f, std::forward<Args>(args)...);
  std::size_t n = plen + (r.size < sizeof buf - plen - 1 ? r.size : sizeof buf - plen - 1);
  buf[n++] = '\n';
  pal::write_stderr(buf, n);
}

// Report heap misuse the way glibc does (one line, then abort) so a corrupted
// heap never keeps running.
[[noreturn]] void fatal_pointer(const char* what, const void* p);
// The same with another diagnosis: "lowtide: <what>: <problem> <p>".
[[noreturn]] void fatal_heap(const char* what, const char* problem, const void* p);

}  // namespace lowtide::log
