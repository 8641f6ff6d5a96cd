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

extern "C" __attribute__((visibility("default"))) void names_run(void** out) {
  out[0] = static_alloc(std::size_t{1} << 20);
  out[1] = hidden_alloc(std::size_t{3} << 20);
}
