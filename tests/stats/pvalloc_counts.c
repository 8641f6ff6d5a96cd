/* pvalloc's bytes requested are what the program asked for, not the page
 * its block is rounded up to (glibc's pvalloc(n) hands out n rounded up to
 * a page, a page for 0). Until 2026-12-07 pvalloc(1) counted 4096 bytes
 * requested. Small and large (past the default 128 KiB cutoff) blocks;
 * each call counted once as an aligned call, the block usable to its page
 * end as glibc's. Runs only under lowtide (the API is looked up weakly). */
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lowtide/lowtide.h"

extern int lowtide_get_stats(struct lowtide_stats* s) __attribute__((weak));

static int failed;

static void get(struct lowtide_stats* s) {
  memset(s, 0, sizeof *s);
  s->size = sizeof *s;
  if (lowtide_get_stats(s) != 0) {
    fprintf(stderr, "pvalloc_counts: lowtide_get_stats failed\n");
    failed = 1;
  }
}

static void one(size_t n) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t rounded = n == 0 ? page : (n + page - 1) / page * page;
  struct lowtide_stats a, b;
  get(&a);
  void* p = pvalloc(n);
  get(&b);
  if (p == NULL || (size_t)p % page != 0 || malloc_usable_size(p) < rounded) {
    fprintf(stderr, "pvalloc_counts: pvalloc(%zu) = %p, usable %zu (want a page-aligned block of %zu)\n", n, p,
            p ? malloc_usable_size(p) : 0, rounded);
    failed = 1;
  }
  const unsigned long long asked = (b.small_requested - a.small_requested) + (b.large_requested - a.large_requested);
  const unsigned long long calls = b.aligned_calls - a.aligned_calls;
  if (asked != n || calls != 1) {
    fprintf(stderr, "pvalloc_counts: pvalloc(%zu) counted %llu bytes requested (small %llu, large %llu) in %llu "
            "aligned calls: want %zu in 1\n", n, asked, (unsigned long long)(b.small_requested - a.small_requested),
            (unsigned long long)(b.large_requested - a.large_requested), calls, n);
    failed = 1;
  }
  free(p);
}

int main(void) {
  if (lowtide_get_stats == NULL) {
    fprintf(stderr, "pvalloc_counts: lowtide_get_stats not found: is liblowtide.so preloaded?\n");
    return 2;
  }
  /* The first large block starts lowtide's threads, whose TLS the loader
   * allocates on this thread (reliability.md, "Found, not fixed"): before
   * the readings. */
  free(malloc(1 << 20));
  const size_t sizes[] = {0, 1, 100, 4096, 5000, 200000, (1u << 20) + 1};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) one(sizes[i]);
  return failed;
}
