// A give-back under a finite RLIMIT_DATA must reset the flags of the run
// it makes read-write, as it does without a limit (reliability.md no. 119).
// When drop_writable was an mprotect there, the free space kept a freed
// block's madvise flags, and so did a block later committed over it (an
// mprotect too under a limit): MADV_HUGEPAGE (numpy advises arrays of
// 4 MiB and more) made a sparse block fault 2 MiB per byte touched where
// THP is in `madvise` mode (6 MiB resident for four bytes, glibc 20 KiB);
// MADV_DONTFORK (ibverbs on registered buffers) left the new block out of
// a forked child, which died of SIGSEGV reading it; MADV_WIPEONFORK gave
// the child zeros.
//
// Here: the limit 512 MiB above VmData; three 8 MiB blocks; the middle
// one's pages after its first advised MADV_DONTFORK (1 MiB), then
// MADV_WIPEONFORK (to its first 2 MiB boundary), its 2 MiB-aligned interior
// MADV_HUGEPAGE; it is freed and given back (malloc_trim) between its live
// neighbours; then an 8 MiB block allocated over it and written. No mapping
// over the freed block, then over the new one, may carry any of those
// flags (smaps VmFlags "hg", "dc", "wf": the kernel sets them whatever
// THP's mode, so the check does not depend on huge pages being free), and
// a forked child must read the new block as written.
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "large_reused.h"

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

static const char* const kFlags[] = {" hg", " dc", " wf"};

// How many mappings meet [p, p+len) (*maps), and how many of them carry
// any of kFlags in smaps' VmFlags (-1 where smaps cannot be read); said,
// unless `what` is null.
static int advised(const char* what, uintptr_t p, size_t len, int* maps) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return -1;
  char line[512];
  int in = 0, hits = 0;
  *maps = 0;
  const uintptr_t a = p, b = a + len;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long s, e;
    char c;
    if (sscanf(line, "%lx-%lx %c", &s, &e, &c) == 3) {
      in = s < b && e > a;
      *maps += in;
      continue;
    }
    if (!in || strncmp(line, "VmFlags:", 8) != 0) continue;
    int hit = 0;
    for (size_t i = 0; i < sizeof kFlags / sizeof kFlags[0]; ++i) hit |= strstr(line, kFlags[i]) != NULL;
    if (hit && what != NULL) fprintf(stderr, "data_limit_hugepage: %s: a mapping over it is advised: %s", what, line);
    hits += hit;
  }
  fclose(f);
  return hits;
}

int main(void) {
  struct lowtide_stats st;
  lowtide_stats_now("data_limit_hugepage", &st);  // exits 2 unless under lowtide
  const size_t mib = (size_t)1 << 20;
  long v0;
  struct rlimit old, lim;
  const int set = data_limit_above("data_limit_hugepage", 512 * mib, &v0, &old, &lim);
  if (set != 0) return set;
  char* three[3];
  for (int i = 0; i < 3; ++i) {
    three[i] = malloc(8 * mib);
    if (three[i] == NULL) return 1;
    memset(three[i], 0x5a, 8 * mib);
  }
  char* b = three[1];
  // The block's own first page (its header) is left alone.
  char* page = (char*)(((uintptr_t)b + 4095) & ~(uintptr_t)4095);
  char* interior = (char*)(((uintptr_t)b + 2 * mib - 1) & ~(uintptr_t)(2 * mib - 1));
  if (interior - page < (ptrdiff_t)(mib + 8192)) interior += 2 * mib;  // room for both in front
  if (madvise(page, mib, MADV_DONTFORK) != 0 || madvise(page + mib, interior - page - mib, MADV_WIPEONFORK) != 0 ||
      madvise(interior, 4 * mib, MADV_HUGEPAGE) != 0) {
    printf("data_limit_hugepage: madvise: %s: skipped\n", strerror(errno));
    return 77;
  }
  int maps = 0;
  // (Its address as a number: after the free only the range is looked at.)
  const uintptr_t b_at = (uintptr_t)b;
  if (advised(NULL, b_at, 8 * mib, &maps) != 3) {
    printf("data_limit_hugepage: smaps shows not all three advices: skipped\n");
    return 77;
  }
  free(b);
  malloc_trim(0);  // the cache's blocks given back
  int bad = 0;
  const int freed = advised("the freed block", b_at, 8 * mib, &maps);
  fprintf(stderr, "data_limit_hugepage: freed block: %d mapping(s), %d advised\n", maps, freed);
  bad |= freed != 0;
  char* d = malloc(8 * mib);
  if (d == NULL) return 1;
  memset(d, 0x7e, 8 * mib);
  const int fresh = advised("the new block", (uintptr_t)d, 8 * mib, &maps);
  fprintf(stderr, "data_limit_hugepage: new block %s the freed one: %d mapping(s), %d advised\n",
          (uintptr_t)d == b_at ? "over" : "not over", maps, fresh);
  bad |= fresh != 0;
  fflush(NULL);
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    size_t wrong = 0;
    for (size_t i = 0; i < 8 * mib; ++i) wrong += d[i] != 0x7e;
    _exit(wrong != 0 ? 3 : 0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return 1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "data_limit_hugepage: a forked child reading the new block: %s %d\n",
            WIFSIGNALED(status) ? "killed by signal" : "exit status (3: not as written)",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    bad = 1;
  }
  if (three[0][8 * mib - 1] != 0x5a || three[2][0] != 0x5a) return 1;
  free(d);
  free(three[0]);
  free(three[2]);
  if (bad) return 1;
  printf("data_limit_hugepage: ok\n");
  return 0;
}
