// Whether the unit tests run under valgrind (scripts/test runs them so),
// for the few checks whose premise valgrind changes: it refuses some
// system calls, and it runs one thread at a time, so a race a test sets
// up between two threads may never happen there.
#pragma once

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif

inline bool under_valgrind() {
#if __has_include(<valgrind/valgrind.h>)
  return RUNNING_ON_VALGRIND != 0;
#else
  return false;
#endif
}
