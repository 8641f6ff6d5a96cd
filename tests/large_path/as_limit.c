// A program that lowers its own RLIMIT_AS while it runs (reliability.md
// no. 103): lowtide's range, reserved at start-up (1 TiB by default,
// PROT_NONE), counted in full against the new limit, and every later mmap
// was refused, mimalloc's too: under a 4 GiB limit small blocks failed after
// ~30 MiB (Python's resource.setrlimit(RLIMIT_AS, ...) raised MemoryError
// after ~24,000 strings of 1 KB). Now setrlimit and prlimit cut the range's
// free tail to an eighth of the limit first, keeping what is in use.
// Checked, in children (each limit is for good):
//  - setrlimit: a large block allocated before the limit stays intact and
//    can still be freed and grown; then 256 MiB of small blocks and 256 MiB
//    of 8 MiB blocks are served, filled and checked; VmSize fits the limit;
//    and the large blocks came from lowtide's range (its counters moved).
//  - prlimit(0, ...) and prlimit(getpid(), ...): the same cut.
//  - prlimit of another process (the parent's pid): nothing is cut here.
//  - a limit above the range, set from what is mapped now plus 64 MiB:
//    nothing is cut (the range is not given to the program on top of it),
//    and small blocks are refused within 64 MiB + 32 MiB, as the limit says.
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "large_reused.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

// Large blocks handed out so far (freshly mapped or reused), and those
// mimalloc served because the range could not.
static void large_counts(uint64_t* maps, uint64_t* fallback) {
  struct lowtide_stats s;
  lowtide_stats_now("as_limit", &s);
  *maps = s.large_maps;
  *fallback = s.large_fallback;
}

enum { SETRLIMIT, PRLIMIT_SELF0, PRLIMIT_PID, RELATIVE };

static int run(int how, pid_t parent) {
  if (how == RELATIVE) {
    const long vm = status_kib("VmSize");
    if (vm <= 0) return 30;
    const size_t cap = (size_t)vm * 1024 + 64 * MiB;
    struct rlimit rel = {cap, cap};
    if (setrlimit(RLIMIT_AS, &rel) != 0) return 31;
    const long vm2 = status_kib("VmSize");
    if (vm2 < vm - 1024) {
      fprintf(stderr, "  VmSize fell from %ld to %ld KiB under a limit above the range\n", vm, vm2);
      return 32;
    }
    // 64 KiB blocks until refused: at most the 64 MiB the limit left, and
    // mimalloc's segment rounding.
    size_t got = 0;
    void* head = NULL;
    for (int i = 0; i < 16384; ++i) {
      void** p = malloc(64 * 1024);
      if (p == NULL) break;
      *p = head;
      head = p;
      got += 64 * 1024;
    }
    if (got > 96 * MiB) {
      fprintf(stderr, "  %zu MiB of small blocks served under a limit 64 MiB above what was mapped\n", got >> 20);
      return 33;
    }
    while (head != NULL) {
      void* next = *(void**)head;
      free(head);
      head = next;
    }
    return 0;
  }
  const size_t limit = 4 * GiB;
  // A large block from before the limit, written whole.
  unsigned char* before = malloc(64 * MiB);
  if (before == NULL) return 10;
  memset(before, 0x5a, 64 * MiB);
  const long vm_before = status_kib("VmSize");
  struct rlimit rl = {limit, limit};
  int r;
  if (how == SETRLIMIT) r = setrlimit(RLIMIT_AS, &rl);
  else if (how == PRLIMIT_SELF0) r = prlimit(0, RLIMIT_AS, &rl, NULL);
  else r = prlimit(parent, RLIMIT_AS, &rl, NULL);
  if (r != 0) {
    fprintf(stderr, "  the limit call failed: %s\n", strerror(errno));
    return 11;
  }
  const long vm_after = status_kib("VmSize");
  if (how == PRLIMIT_PID) {
    // Another process's limit: this process's range is left as it was.
    if (vm_after < vm_before - 1024) {
      fprintf(stderr, "  VmSize fell from %ld to %ld KiB for another process's limit\n", vm_before, vm_after);
      return 12;
    }
    free(before);
    return 0;
  }
  if (vm_after < 0 || (size_t)vm_after * 1024 > limit) {
    fprintf(stderr, "  VmSize %ld KiB after the limit call, over the 4 GiB limit (before: %ld)\n", vm_after,
            vm_before);
    return 13;
  }
  // The block from before: intact, and it grows.
  for (size_t i = 0; i < 64 * MiB; i += 4096)
    if (before[i] != 0x5a) return 14;
  unsigned char* grown = realloc(before, 96 * MiB);
  if (grown == NULL) return 15;
  for (size_t i = 0; i < 64 * MiB; i += 4096)
    if (grown[i] != 0x5a) return 16;
  // 256 MiB of small blocks, then 256 MiB of large ones, all under the limit.
  enum { kSmall = 4096, kLarge = 32 };
  static unsigned char* small[kSmall];
  static unsigned char* large[kLarge];
  for (int i = 0; i < kSmall; ++i) {
    small[i] = malloc(64 * 1024);
    if (small[i] == NULL) {
      fprintf(stderr, "  small block %d of %d refused under the limit\n", i, kSmall);
      return 17;
    }
    memset(small[i], i & 0xff, 64 * 1024);
  }
  uint64_t maps = 0, fallback = 0, maps_after = 0, fallback_after = 0;
  large_counts(&maps, &fallback);
  for (int i = 0; i < kLarge; ++i) {
    large[i] = malloc(8 * MiB);
    if (large[i] == NULL) {
      fprintf(stderr, "  large block %d of %d refused under the limit\n", i, kLarge);
      return 18;
    }
    memset(large[i], (i + 7) & 0xff, 8 * MiB);
  }
  large_counts(&maps_after, &fallback_after);
  if (maps_after < maps + kLarge || fallback_after != fallback) {
    fprintf(stderr, "  the 8 MiB blocks did not come from lowtide's range\n");
    return 19;
  }
  for (int i = 0; i < kSmall; ++i)
    if (small[i][0] != (i & 0xff) || small[i][64 * 1024 - 1] != (i & 0xff)) return 20;
  for (int i = 0; i < kLarge; ++i)
    if (large[i][0] != ((i + 7) & 0xff) || large[i][8 * MiB - 1] != ((i + 7) & 0xff)) return 21;
  for (int i = 0; i < kSmall; ++i) free(small[i]);
  for (int i = 0; i < kLarge; ++i) free(large[i]);
  free(grown);
  // Still under the limit once everything was freed and cached.
  if ((size_t)status_kib("VmSize") * 1024 > limit) return 22;
  return 0;
}

static const char* const names[] = {"setrlimit(RLIMIT_AS, 4 GiB) while running",
                                    "prlimit(0, RLIMIT_AS, 4 GiB) while running",
                                    "prlimit(parent, RLIMIT_AS, ...): this process's range left alone",
                                    "a limit above the range (what is mapped + 64 MiB): nothing cut, it limits"};

int main(void) {
  int failed = 0;
  for (int how = SETRLIMIT; how <= RELATIVE; ++how) {
    fflush(stdout);
    const pid_t parent = getpid();
    // The third case limits its parent: a child of its own stands in for it.
    pid_t target = parent;
    if (how == PRLIMIT_PID) {
      target = fork();
      if (target < 0) return 1;
      if (target == 0) {
        pause();
        _exit(0);
      }
    }
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) _exit(run(how, target));
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return 1;
    if (how == PRLIMIT_PID) {
      kill(target, SIGKILL);
      waitpid(target, NULL, 0);
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
      printf("ok: %s\n", names[how]);
    } else {
      ++failed;
      if (WIFSIGNALED(st)) printf("FAIL: %s: killed by signal %d\n", names[how], WTERMSIG(st));
      else printf("FAIL: %s: exit %d\n", names[how], WEXITSTATUS(st));
    }
  }
  printf("%s as_limit\n", failed ? "FAIL" : "PASS");
  return failed ? 1 : 0;
}
