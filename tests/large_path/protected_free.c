// Large blocks freed while the program had taken write permission from
// them (reliability.md no. 76): a JIT's code buffer left read-only, a
// coroutine stack's guard page left PROT_NONE, a block keyed with
// pkey_mprotect. glibc unmaps such blocks at free; lowtide's reuse cache
// kept them as they were, and the next large malloc or calloc of the size
// got them: calloc's zeroing inside lowtide, or the program's first write,
// died of SIGSEGV. Each case below frees such a block and then takes one of
// the same size, which the cache serves (checked by its counters, so the
// test cannot pass by the block going back to the OS), and writes all of
// it. Run in a child per case, so that a crash names its case.
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "large_reused.h"

#define MiB ((size_t)1 << 20)

// The case: what the program does to its block before freeing it.
enum { READ_ONLY, GUARD_PAGE, NONE_WHOLE, PKEY_NONE, PKEY_KEYED, EXEC_ONLY };
static const char* const names[] = {"read-only (mprotect PROT_READ)", "a PROT_NONE guard page at its front",
                                    "PROT_NONE whole", "pkey_mprotect(PROT_READ, -1)",
                                    "pkey_mprotect(PROT_READ, a key)", "PROT_READ|PROT_EXEC"};

// 0: ran and passed; 3: this machine cannot run the case (said why).
static int run_case(int which, int use_calloc) {
  const size_t size = 4 * MiB;
  void* p = NULL;
  if (posix_memalign(&p, 4096, size) != 0) return 1;
  memset(p, 0x5a, size);
  int rc = 0;
  switch (which) {
    case READ_ONLY: rc = mprotect(p, size, PROT_READ); break;
    case GUARD_PAGE: rc = mprotect(p, 4096, PROT_NONE); break;
    case NONE_WHOLE: rc = mprotect(p, size, PROT_NONE); break;
    case PKEY_NONE: rc = pkey_mprotect(p, size, PROT_READ, -1); break;
    case PKEY_KEYED: {
      const int key = pkey_alloc(0, 0);
      if (key < 0) {
        printf("  (pkey_alloc: %s: no protection keys here, case not run)\n", strerror(errno));
        return 3;
      }
      // The key write-disabled for this thread: a write to the block faults
      // even where its protection bits allow it.
      rc = pkey_mprotect(p, size, PROT_READ | PROT_WRITE, key);
      if (rc == 0) rc = pkey_set(key, PKEY_DISABLE_WRITE);
      break;
    }
    case EXEC_ONLY: rc = mprotect(p, size, PROT_READ | PROT_EXEC); break;
  }
  if (rc != 0) {
    fprintf(stderr, "  setting the protection: %s\n", strerror(errno));
    return 1;
  }
  const uint64_t before = large_reused("protected_free");
  free(p);
  unsigned char* q = use_calloc ? calloc(1, size) : malloc(size);
  if (q == NULL || served_from_cache("protected_free", before) != 0) return 1;
  if (use_calloc) {
    for (size_t i = 0; i < size; i += 4096)
      if (q[i] != 0) {
        fprintf(stderr, "  calloc's block not zero at %zu\n", i);
        return 1;
      }
  }
  // Every page written (volatile: a memset before the free would be a
  // dead store to the compiler): dies here without the fix.
  volatile unsigned char* v = q;
  for (size_t i = 0; i < size; i += 4096) v[i] = 0x33;
  v[size - 1] = 0x33;
  free(q);
  return 0;
}

int main(void) {
  int failed = 0, ran = 0;
  for (int which = READ_ONLY; which <= EXEC_ONLY; ++which) {
    for (int use_calloc = 0; use_calloc < 2; ++use_calloc) {
      fflush(stdout);
      const pid_t pid = fork();
      if (pid < 0) return 1;
      if (pid == 0) _exit(run_case(which, use_calloc));
      int st = 0;
      if (waitpid(pid, &st, 0) != pid) return 1;
      const char* how = use_calloc ? "calloc" : "malloc";
      if (WIFEXITED(st) && WEXITSTATUS(st) == 3) continue;
      ++ran;
      if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        printf("ok: a block freed %s, then %s of its size from the cache\n", names[which], how);
      } else {
        ++failed;
        if (WIFSIGNALED(st))
          printf("FAIL: a block freed %s, then %s of its size: killed by signal %d\n", names[which], how,
                 WTERMSIG(st));
        else
          printf("FAIL: a block freed %s, then %s of its size: exit %d\n", names[which], how, WEXITSTATUS(st));
      }
    }
  }
  // Every case but the keyed one runs on any machine.
  if (ran < 10) {
    printf("FAIL: only %d cases ran\n", ran);
    return 1;
  }
  printf("%s protected_free (%d cases)\n", failed ? "FAIL" : "PASS", ran);
  return failed ? 1 : 0;
}
