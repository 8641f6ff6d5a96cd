// calloc of a block the reuse cache serves writes only the pages that hold
// something (reliability.md no. 99): the pages a program never touched, or
// gave back itself (MADV_DONTNEED), read as zero already, and writing them
// faulted each one in (a calloc of a sparse table taken from the cache cost
// a fault per page and all of its memory). The block must still read as
// zero everywhere: pages written with data, pages only read (the kernel's
// shared zero page), pages dropped and never touched alike.
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdint.h>

#include "large_reused.h"

#define PAGE 4096u

// The process's resident bytes now, exactly: smaps_rollup walks the page
// tables (statm's counters are per-CPU estimates), and pages only read,
// which map the kernel's shared zero page, are not counted.
static long rss_kib(void) {
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  if (f == NULL) {
    perror("smaps_rollup");
    exit(1);
  }
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "Rss: %ld kB", &kib) == 1) break;
  fclose(f);
  return kib;
}

static int check_zero(const char* what, const unsigned char* c, size_t usable) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < usable; ++i)
    if (c[i] != 0 && bad++ == 0) first = i;
  if (bad == 0) return 0;
  fprintf(stderr, "%s: %zu bytes not zero, the first at %zu (usable %zu)\n", what, bad, first, usable);
  return 1;
}

// A fresh block of `size` with one byte written every `stride` pages (and,
// where `read_too`, one read in each page between), freed, then a calloc of
// the same size from the cache: it reads as zero, and the calloc made no
// more of it resident (a few pages of slack: the header's, the stats).
static int run(const char* what, size_t size, size_t stride, int read_too, int drop_half) {
  malloc_trim(0);  // an empty cache: the block below is fresh pages
  unsigned char* p = malloc(size);
  if (p == NULL) return 1;
  const size_t usable = malloc_usable_size(p);
  volatile unsigned char* v = p;
  size_t written = 0;
  unsigned sum = 0;
  for (size_t off = PAGE; off < usable; off += PAGE) {
    if ((off / PAGE) % stride == 0) {
      v[off] = 0x5a;
      ++written;
    } else if (read_too) {
      sum += v[off];
    }
  }
  if (sum != 0) {
    fprintf(stderr, "%s: a fresh block read non-zero\n", what);
    return 1;
  }
  if (drop_half) {
    // The program gives the second half's pages back itself.
    const uintptr_t mid = ((uintptr_t)p + usable / 2 + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
    const uintptr_t end = ((uintptr_t)p + usable) & ~(uintptr_t)(PAGE - 1);
    if (madvise((void*)mid, end - mid, MADV_DONTNEED) != 0) {
      perror("madvise");
      return 1;
    }
  }
  const uint64_t before = large_reused("calloc_sparse");
  free(p);
  const long rss_before = rss_kib();
  unsigned char* c = calloc(1, size);
  const long rss_after = rss_kib();
  if (c == NULL || served_from_cache("calloc_sparse", before) != 0) return 1;
  int failed = check_zero(what, c, malloc_usable_size(c));
  if (rss_after - rss_before > 8 * PAGE / 1024) {
    fprintf(stderr, "%s: the calloc made %ld KiB resident (%zu pages of %zu were written)\n", what,
            rss_after - rss_before, written, usable / PAGE);
    failed = 1;
  }
  free(c);
  return failed;
}

int main(void) {
  // Once before measuring: the first fopen, stats call and trim set up
  // memory of their own (mimalloc's pages for their size classes).
  (void)rss_kib();
  (void)large_reused("calloc_sparse");
  malloc_trim(0);
  (void)rss_kib();
  int failed = 0;
  failed |= run("8 MiB, one page in 16 written", 8u << 20, 16, 0, 0);
  failed |= run("8 MiB, one page in 16 written, the rest read", 8u << 20, 16, 1, 0);
  failed |= run("3 MiB, one page in 4 written, half dropped by the program", 3u << 20, 4, 0, 1);
  failed |= run("512 KiB, one page in 8 written", 512u << 10, 8, 0, 0);
  // Dense: every page written, then all of it must be zeroed.
  failed |= run("2 MiB, every page written", 2u << 20, 1, 0, 0);
  if (failed) return 1;
  printf("calloc_sparse: ok\n");
  return 0;
}
