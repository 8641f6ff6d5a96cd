// A free under a finite RLIMIT_DATA must not take the process over it
// (reliability.md no. 117). A give-back re-maps the freed block together
// with its free neighbours read-write (Arena::give_back, drop_writable: one
// mapping, no split); the kernel checks a MAP_FIXED mmap against the limit
// only after taking off the pages it replaces, PROT_NONE ones among them,
// so where those neighbours were PROT_NONE (made so at a refusal,
// Arena::protect_free) the mmap made them count as data unchecked.
//
// Here: eight 8 MiB blocks, blocks 1 to 6 freed and given back (48 MiB of
// read-write free space between 0 and 7); a limit 16 MiB above VmData;
// malloc(80 MiB) refused (the 48 MiB made PROT_NONE at the refusal); the
// limit set 8 MiB above VmData then; block 0 freed and given back. VmData
// must stay within the limit (before the fix: 54 MiB over it).
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "large_reused.h"

int main(void) {
  struct lowtide_stats st;
  lowtide_stats_now("data_limit_free", &st);  // exits 2 unless under lowtide
  const size_t mib = (size_t)1 << 20;
  char* eight[8];
  if (eight_blocks_freed(eight, 1, 7, 1) != 0) return 1;
  long v0;
  struct rlimit old, lim;
  const int set = data_limit_above("data_limit_free", 16 * mib, &v0, &old, &lim);
  if (set != 0) return set;
  errno = 0;
  char* big = malloc(80 * mib);
  if (big != NULL || errno != ENOMEM) {
    fprintf(stderr, "data_limit_free: malloc(80 MiB) under a limit 16 MiB above VmData: %p, errno %d\n", (void*)big,
            errno);
    return 1;
  }
  const long v1 = status_kib("VmData");
  lim.rlim_cur = ((rlim_t)v1 << 10) + 8 * mib;
  if (setrlimit(RLIMIT_DATA, &lim) != 0) return 1;
  free(eight[0]);
  malloc_trim(0);
  const long v2 = status_kib("VmData");
  fprintf(stderr, "data_limit_free: VmData %ld KiB, %ld after the refusal, %ld after the free (limit %llu KiB)\n", v0,
          v1, v2, (unsigned long long)(lim.rlim_cur >> 10));
  if ((rlim_t)v2 > lim.rlim_cur >> 10) {
    fprintf(stderr, "data_limit_free: a free took VmData over the limit\n");
    return 1;
  }
  if (eight[7][8 * mib - 1] != 0x5a) return 1;
  free(eight[7]);
  printf("data_limit_free: ok\n");
  return 0;
}
