// For the large_path tests written in C: how many large allocations the
// reuse cache has served so far (lowtide_get_stats' large_reused), so that
// a test can tell a block came from the cache and not from fresh pages.
// Exits 2, naming the test, where the program does not run under lowtide.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/resource.h>

#include "lowtide/lowtide.h"

extern int lowtide_get_stats(struct lowtide_stats* s) __attribute__((weak));

// lowtide's counters now, into *s; exits 2, naming the test, where the
// program does not run under lowtide.
static inline void lowtide_stats_now(const char* test, struct lowtide_stats* s) {
  memset(s, 0, sizeof *s);
  s->size = sizeof *s;
  if (lowtide_get_stats == NULL || lowtide_get_stats(s) != 0) {
    fprintf(stderr, "%s: not running under lowtide\n", test);
    exit(2);
  }
}

// A "Key:" line of /proc/self/status (VmSize, VmData, ...), in KiB; -1
// where it cannot be read.
static inline long status_kib(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  const size_t k = strlen(key);
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, key, k) == 0 && line[k] == ':') v = atol(line + k + 1);
  if (f != NULL) fclose(f);
  return v;
}

static inline uint64_t large_reused(const char* test) {
  struct lowtide_stats s;
  lowtide_stats_now(test, &s);
  return s.large_reused;
}

// 0 where exactly one large allocation was served from the reuse cache
// since `before` (large_reused's value then); else says so and returns 1.
static inline int served_from_cache(const char* test, uint64_t before) {
  const uint64_t after = large_reused(test);
  if (after == before + 1) return 0;
  fprintf(stderr, "  the block was not served from the reuse cache (reused %llu -> %llu)\n",
          (unsigned long long)before, (unsigned long long)after);
  return 1;
}

// For the RLIMIT_DATA tests: eight blocks of 8 MiB, written; blocks first,
// first + step, ... below last freed and given back (malloc_trim), free
// space between live blocks.
static inline int eight_blocks_freed(char** eight, int first, int last, int step) {
  for (int i = 0; i < 8; ++i) {
    eight[i] = malloc((size_t)8 << 20);
    if (eight[i] == NULL) return 1;
    memset(eight[i], 0x5a, (size_t)8 << 20);
  }
  for (int i = first; i < last; i += step) free(eight[i]);
  malloc_trim(0);
  return 0;
}

// The soft RLIMIT_DATA set `above` bytes over VmData (*vmdata_kib, read
// first); *old the limits before. 0 when set; 77 (a skip, said) where
// VmData cannot be read or a limit is already set; 1 on an error.
static inline int data_limit_above(const char* test, size_t above, long* vmdata_kib, struct rlimit* old,
                                   struct rlimit* lim) {
  *vmdata_kib = status_kib("VmData");
  if (*vmdata_kib < 0) {
    printf("%s: no VmData in /proc/self/status: skipped\n", test);
    return 77;
  }
  if (getrlimit(RLIMIT_DATA, old) != 0) return 1;
  if (old->rlim_cur != RLIM_INFINITY) {
    printf("%s: RLIMIT_DATA already finite here: skipped\n", test);
    return 77;
  }
  *lim = *old;
  lim->rlim_cur = ((rlim_t)*vmdata_kib << 10) + above;
  return setrlimit(RLIMIT_DATA, lim) != 0 ? 1 : 0;
}
