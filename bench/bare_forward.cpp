// The floor for any library that interposes malloc in front of mimalloc: an
// LD_PRELOAD whose malloc and free only forward to mimalloc, no routing, no
// counting. scripts/bench-counters runs bench/malloc_free under it to split
// lowtide's cost per pair into the interposition itself and what lowtide does.
// The other entry points forward too, so no block ever reaches glibc's free.
#include <mimalloc.h>

#include <cstddef>

extern "C" __attribute__((visibility("default"))) void* malloc(std::size_t n) noexcept { return mi_malloc(n); }
extern "C" __attribute__((visibility("default"))) void free(void* p) noexcept { mi_free(p); }
extern "C" __attribute__((visibility("default"))) void* calloc(std::size_t n, std::size_t s) noexcept {
  return mi_calloc(n, s);
}
extern "C" __attribute__((visibility("default"))) void* realloc(void* p, std::size_t n) noexcept {
  return mi_realloc(p, n);
}
extern "C" __attribute__((visibility("default"))) void* memalign(std::size_t a, std::size_t n) noexcept {
  return mi_memalign(a, n);
}
extern "C" __attribute__((visibility("default"))) void* aligned_alloc(std::size_t a, std::size_t n) noexcept {
  return mi_aligned_alloc(a, n);
}
extern "C" __attribute__((visibility("default"))) int posix_memalign(void** out, std::size_t a, std::size_t n) noexcept {
  return mi_posix_memalign(out, a, n);
}
extern "C" __attribute__((visibility("default"))) std::size_t malloc_usable_size(void* p) noexcept {
  return mi_usable_size(p);
}
