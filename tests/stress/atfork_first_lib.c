/* A library that registers fork handlers from its constructor, before the
 * process's first allocation (a C program's libraries' constructors run
 * before anything allocates), and allocates a large block in each handler
 * (tests/stress/atfork_first.c). glibc runs prepare handlers last
 * registered first and parent and child handlers first registered first:
 * registered before lowtide's, these ran inside lowtide's locked window, and
 * each large allocation waited for ever on a lock lowtide's prepare handler
 * held. */
#include <pthread.h>
#include <stdlib.h>

#include "lowtide/lowtide.h"

extern int lowtide_get_stats(struct lowtide_stats* s) __attribute__((weak));

static volatile int prepared, parented, childed;
static int registered_first = -1; /* 1: before any allocation, 0: after, -1: not under lowtide */

static void touch_large(void) {
  volatile char* p = malloc(1 << 20);
  if (p == NULL) abort();
  p[0] = 1;
  p[(1 << 20) - 1] = 1;
  free((void*)p);
}
static void prepare(void) { touch_large(); ++prepared; }
static void parent(void) { touch_large(); ++parented; }
static void child(void) { touch_large(); ++childed; }

__attribute__((constructor)) static void register_handlers(void) {
  if (lowtide_get_stats != NULL) {
    struct lowtide_stats s;
    s.size = sizeof s;
    if (lowtide_get_stats(&s) == 0)
      registered_first = s.malloc_calls + s.calloc_calls + s.realloc_calls + s.aligned_calls == 0;
  }
  if (pthread_atfork(prepare, parent, child) != 0) abort();
}

void atfork_first_counts(int* first, int* p, int* q, int* c) {
  *first = registered_first;
  *p = prepared;
  *q = parented;
  *c = childed;
}
