// First-call initialisation, the fork handlers, and the mode every entry
// point checks on its way in.
#pragma once
#include "state.hpp"

namespace lowtide {

// Slow part of mode(): runs init if nobody has; returns kReady or
// kForwarding (a thread inside init is served as kReady: its calls go to
// mimalloc, the arena not being ready yet).
int mode_slow();

inline int mode() {
  int m = g.mode.load(std::memory_order_acquire);
  if (__builtin_expect(m == kReady, 1)) return m;
  return mode_slow();
}

// The exported __cxa_atexit: glibc's, after one look at AT_SECURE. Why it
// is interposed at all: libmimalloc's constructor registers its exit hook
// with it *before* it reads MIMALLOC_* (mimalloc 2.0.9 mi_process_load), and
// it runs before any constructor of lowtide's (lowtide depends on it). In a
// setuid program this first call sets every mimalloc option to its default
// (small::ignore_environment), so mimalloc never reads the user's
// variables, in C and C++ programs alike. Allocates nothing; the only lock
// is the loader's (recursive), once, to find glibc's function.
int cxa_atexit(void (*f)(void*), void* arg, void* dso) noexcept;

// The exported __register_atfork (what pthread_atfork calls): glibc's,
// after lowtide's first-call init, so that lowtide's own fork handlers are
// always the first registered (init.cpp says why).
int register_atfork(void (*prepare)(), void (*parent)(), void (*child)(), void* dso) noexcept;

}  // namespace lowtide
