// When lowtide is not the process's malloc (it was dlopen'ed, another
// allocator is earlier in LD_PRELOAD, or the program defines malloc), every
// call is forwarded to the allocator that won, so no pointer ever meets an
// allocator that did not make it.
#pragma once
#include <atomic>
#include <cstddef>
#include <malloc.h>

namespace lowtide::forward {

// The winner's entry points lowtide forwards to (aligned_alloc, valloc and
// pvalloc reach its memalign, as lowtide's own do).
struct Winner {
  void* (*malloc)(std::size_t);
  void (*free)(void*);
  void* (*calloc)(std::size_t, std::size_t);
  void* (*realloc)(void*, std::size_t);
  void* (*memalign)(std::size_t, std::size_t);
  int (*posix_memalign)(void**, std::size_t, std::size_t);
  std::size_t (*usable)(void*);
  int (*trim)(std::size_t);
  int (*mallopt)(int, int);
};

extern Winner winner;

// Set by our own malloc when detect()'s probe call reaches it (init.cpp).
extern std::atomic<bool> probe_hit;

// Called once from lowtide's constructor: true when some other object's
// malloc is the one the dynamic linker binds globally; fills `winner`.
bool detect();

}  // namespace lowtide::forward
