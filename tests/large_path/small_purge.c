// A small request the kernel refused memory for gets the reuse cache's
// blocks given back and is tried again (reliability.md no. 102). The cache
// keeps freed large blocks committed, and that memory counts against the
// same limits as mimalloc's (RLIMIT_DATA, overcommit mode 2's charge):
// glibc unmaps such a block at free, so the memory is the program's again,
// where under lowtide small requests failed with up to the cache's cap of
// freed blocks still held (a new_handler that frees a reserve block, as
// C++ programs do, freed it into the cache and got bad_alloc all the
// same). Here a 64 MiB block is written, freed into the cache, RLIMIT_DATA
// is set 16 MiB above what the process uses, and blocks of 64 KiB (small:
// below the cutoff) are taken until one fails: at least 48 MiB of them
// must be served, and the failure must be NULL with ENOMEM.
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "large_reused.h"

static long vm_data_kib(void) { return status_kib("VmData"); }

static uint64_t cached_bytes(void) {
  struct lowtide_stats s;
  lowtide_stats_now("small_purge", &s);
  return s.large_cached_bytes;
}

enum { kMax = 2048 };  // 128 MiB of 64 KiB blocks
static char* held[kMax];

int main(void) {
  const size_t big = (size_t)64 << 20, n = (size_t)64 << 10;
  char* b = malloc(big);
  if (b == NULL) return 1;
  memset(b, 0x5a, big);
  free(b);
  if (cached_bytes() < big) {
    printf("small_purge: the 64 MiB block was not cached (LOWTIDE_CACHE?): skipped\n");
    return 77;
  }
  const long kib = vm_data_kib();
  if (kib < 0) {
    printf("small_purge: no VmData in /proc/self/status: skipped\n");
    return 77;
  }
  struct rlimit old, lim;
  if (getrlimit(RLIMIT_DATA, &old) != 0) return 1;
  lim = old;
  lim.rlim_cur = ((rlim_t)kib << 10) + ((rlim_t)16 << 20);
  if (setrlimit(RLIMIT_DATA, &lim) != 0) return 1;
  int got = 0, err = 0;
  while (got < kMax) {
    errno = 0;
    char* p = malloc(n);
    if (p == NULL) {
      err = errno;
      break;
    }
    p[0] = 1;
    p[n - 1] = 2;
    held[got++] = p;
  }
  const uint64_t left = cached_bytes();
  if (setrlimit(RLIMIT_DATA, &old) != 0) return 1;
  for (int i = 0; i < got; ++i) free(held[i]);
  const size_t served = (size_t)got * n;
  fprintf(stderr, "small_purge: %zu MiB of 64 KiB blocks served under the limit (%s), %llu bytes left cached\n",
          served >> 20, got == kMax ? "no failure" : err == ENOMEM ? "then ENOMEM" : "then another errno",
          (unsigned long long)left);
  if (served < ((size_t)48 << 20) || (got < kMax && err != ENOMEM)) {
    fprintf(stderr, "  want 48 MiB or more (the cached block given back), and NULL with ENOMEM at the end\n");
    return 1;
  }
  printf("small_purge: ok\n");
  return 0;
}
