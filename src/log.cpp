#include "log.hpp"

#include <cstdlib>

namespace lowtide::log {

void fatal_pointer(const char* what, const void* p) { fatal_heap(what, "double free or invalid pointer", p); }

void fatal_heap(const char* what, const char* problem, const void* p) {
  char buf[256];
  auto r = fmt::format_to_n(buf, sizeof buf - 1, "lowtide: {}: {} {}\n", what, problem, p);
  std::size_t n = r.size < sizeof buf - 1 ? r.size : sizeof buf - 1;
  pal::write_stderr(buf, n);
  std::abort();
}

}  // namespace lowtide::log
