// A shared object whose large blocks come from functions the dynamic symbol
// table does not have: a static one and a hidden one. Only .symtab (and
// DWARF, built with -g) name them. The marker comments give the test the
// line of each malloc call.
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace {

__attribute__((noinline)) void* static_alloc(std::size_t n) {
  void* p = std::malloc(n);  // MALLOC-STATIC
  if (p != nullptr) std::memset(p, 1, 64);
  return p;
}

}  // namespace

__attribute__((visibility("hidden"), noinline)) void* hidden_alloc(std::size_t n) {
  void* p = std::malloc(n);  // MALLOC-HIDDEN
  if (p != nullptr) std::memset(p, 2, 64);
  return p;
}

// Inlined into outer_alloc: the line table says the malloc call is on the
// inner line; the frame, named outer_alloc, is at the line that calls it.
__attribute__((always_inline)) inline void* inner_alloc(std::size_t n) {
  return std::malloc(n);  // MALLOC-INNER
}

__attribute__((visibility("hidden"), noinline)) void* outer_alloc(std::size_t n) {
  void* p = inner_alloc(n);  // MALLOC-OUTER
  if (p != nullptr) std::memset(p, 3, 64);
  return p;
}

extern "C" __attribute__((visibility("default"))) void names_run(void** out) {
  out[0] = static_alloc(std::size_t{1} << 20);
  out[1] = hidden_alloc(std::size_t{3} << 20);
  out[2] = outer_alloc(std::size_t{5} << 20);
}
