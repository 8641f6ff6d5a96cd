// Loaded and unloaded in a loop by sites_dlopen.cpp. Its constructor
// allocates a large block while the loader holds its lock (so a capture runs
// inside dlopen), and its exported function allocates one the caller frees
// after the library is gone: the site must keep the module it was seen in.
#include <cstdlib>
#include <cstring>

namespace {
void* volatile g_block;
struct Init {
  Init() {
    g_block = std::malloc(std::size_t{300} << 10);
    if (g_block != nullptr) std::memset(g_block, 1, 4096);
  }
  ~Init() { std::free(g_block); }
} g_init;
}  // namespace

extern "C" __attribute__((visibility("default"), noinline)) void* sites_target_alloc(std::size_t n) {
  void* p = std::malloc(n);
  if (p != nullptr) std::memset(p, 2, 4096);
  return p;
}
