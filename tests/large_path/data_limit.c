// Large blocks obey a finite RLIMIT_DATA as glibc's mapped chunks do
// (reliability.md no. 109). The kernel checks a MAP_FIXED mmap against the
// limit only after taking off the pages it replaces, lowtide's PROT_NONE
// reservation among them, so a commit over the range was never refused:
// malloc(512 MiB) under a 256 MiB limit got a pointer where glibc gets
// NULL. And free space between live blocks, left read-write by a give-back
// (one mapping, no split), counts against the limit as data: at the limit
// it must be given up.
//
// Here: blocks 1, 3 and 5 of eight 8 MiB blocks are freed and given back
// (malloc_trim), 24 MiB of read-write free space between live blocks. Under
// a limit 64 MiB above VmData, 4 MiB blocks are taken until one fails: at
// least 96 MiB must be served (the free space given up at the limit), with
// VmData within the limit, and the failure NULL with ENOMEM. Then
// malloc(512 MiB) must be NULL with ENOMEM; all the 4 MiB blocks are freed
// (the reuse cache keeps some), and 64 KiB blocks must then be served for
// at least 96 MiB, the last failure NULL with ENOMEM.
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "large_reused.h"

enum { kMax = 8192 };  // 512 MiB of 64 KiB blocks: past the limit
static char* held[kMax];

// Blocks of n bytes (one byte written in each) until one fails or kMax;
// *err: errno of the failure (0: none). Returns how many.
static int take(size_t n, int* err) {
  int got = 0;
  *err = 0;
  while (got < kMax) {
    errno = 0;
    char* p = malloc(n);
    if (p == NULL) {
      *err = errno;
      break;
    }
    p[0] = 1;
    held[got++] = p;
  }
  return got;
}

int main(void) {
  struct lowtide_stats st;
  lowtide_stats_now("data_limit", &st);  // exits 2 unless under lowtide
  const size_t mib = (size_t)1 << 20;
  char* eight[8];
  if (eight_blocks_freed(eight, 1, 7, 2) != 0) return 1;
  long before;
  struct rlimit old, lim;
  const int set = data_limit_above("data_limit", 64 * mib, &before, &old, &lim);
  if (set != 0) return set;
  int bad = 0, err;
  int got = take(4 * mib, &err);
  const long at_most = status_kib("VmData");
  fprintf(stderr, "data_limit: %d MiB of 4 MiB blocks, VmData then %ld KiB (limit %llu KiB)\n", got * 4, at_most,
          (unsigned long long)(lim.rlim_cur >> 10));
  if ((rlim_t)at_most > lim.rlim_cur >> 10 || got * 4 < 96 || got == kMax || err != ENOMEM) {
    fprintf(stderr, "  want VmData within the limit, at least 96 MiB served (64 + the free space given up), then NULL "
                    "with ENOMEM\n");
    bad = 1;
  }
  errno = 0;
  char* huge = malloc(512 * mib);
  const int huge_err = errno;
  if (huge != NULL || huge_err != ENOMEM) {
    fprintf(stderr, "  malloc(512 MiB) under a limit 64 MiB above VmData: %p, errno %d; want NULL, ENOMEM\n",
            (void*)huge, huge_err);
    bad = 1;
    free(huge);
  }
  for (int i = 0; i < got; ++i) free(held[i]);
  got = take(64 << 10, &err);
  fprintf(stderr, "data_limit: then %d MiB of 64 KiB blocks (errno %d at the end)\n", got / 16, err);
  if (got / 16 < 96 || got == kMax || err != ENOMEM) {
    fprintf(stderr, "  want at least 96 MiB served, then NULL with ENOMEM\n");
    bad = 1;
  }
  if (setrlimit(RLIMIT_DATA, &old) != 0) return 1;
  for (int i = 0; i < got; ++i) free(held[i]);
  for (int i = 0; i < 8; i += 2) free(eight[i]);
  free(eight[7]);
  if (bad) return 1;
  printf("data_limit: ok\n");
  return 0;
}
