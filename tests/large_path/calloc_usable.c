// calloc of a block the reuse cache serves reads as zero over all of its
// usable bytes (malloc_usable_size), not only the bytes asked for
// (reliability.md no. 96): glibc's calloc and mimalloc's (lowtide's small
// path) zero the whole usable block, and a fresh large block reads as zero
// to its end. Before the fix, the tail past the request (up to 64 KiB) of
// a cached block kept the freed block's bytes. Each size below is freed
// dirty, then a calloc a little smaller than it is served from the cache
// (checked by its counters, so the test cannot pass by fresh pages) and
// read to its usable end.
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "large_reused.h"

// The freed block's bytes, written through a volatile pointer: a memset
// right before free is a dead store the compiler may drop.
static void dirty(unsigned char* p, size_t n) {
  volatile unsigned char* v = p;
  for (size_t i = 0; i < n; ++i) v[i] = 0xa5;
}

static int run(size_t size, size_t less) {
  unsigned char* p = malloc(size);
  if (p == NULL) return 1;
  dirty(p, malloc_usable_size(p));
  const uint64_t before = large_reused("calloc_usable");
  free(p);
  const size_t n = size - less;
  unsigned char* c = calloc(1, n);
  if (c == NULL || served_from_cache("calloc_usable", before) != 0) return 1;
  const size_t usable = malloc_usable_size(c);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < usable; ++i)
    if (c[i] != 0 && bad++ == 0) first = i;
  free(c);
  if (bad != 0) {
    fprintf(stderr, "calloc(%zu) from the cache (usable %zu): %zu bytes not zero, the first at %zu\n", n, usable, bad,
            first);
    return 1;
  }
  return 0;
}

int main(void) {
  // A size and how much smaller the calloc is: the same granules, so the
  // freed block's extent serves it, its usable end past the request. (The
  // 4 MiB one starts on a 2 MiB boundary: a huge-page-aligned take.)
  static const struct { size_t size, less; } cases[] = {
      {1 << 20, 40000}, {(1 << 20) + 200, 60000}, {300000, 20000}, {4 << 20, 50000}};
  int failed = 0;
  for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; ++i) failed |= run(cases[i].size, cases[i].less);
  if (failed) return 1;
  printf("calloc_usable: ok\n");
  return 0;
}
