// Small blocks: mimalloc's mi_* API, with the request rounded so every block
// is 16-byte aligned as glibc's are.
#pragma once
#include <mimalloc.h>

#include "size_math.hpp"

namespace lowtide::small {

inline void* allocate(std::size_t n) { return mi_malloc(small_request(n)); }
inline void* allocate_zeroed(std::size_t n) { return mi_zalloc(small_request(n)); }
// mimalloc 2.0.9's mi_malloc_aligned misaligns e.g. (256, 256) (fixed in
// 2.1.0); the _at variant with offset 0 takes a path that does not.
inline void* allocate_aligned(std::size_t n, std::size_t align) {
  return align <= kMinAlign ? allocate(n) : mi_malloc_aligned_at(small_request(n), align, 0);
}
inline void* reallocate(void* p, std::size_t n) { return mi_realloc(p, small_request(n)); }
inline void release(void* p) { mi_free(p); }
inline std::size_t usable(const void* p) { return mi_usable_size(p); }

// Set at init: mimalloc options lowtide needs, as defaults so a user's own
// MIMALLOC_* variables still win.
void configure();

}  // namespace lowtide::small
