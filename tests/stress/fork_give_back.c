// A fork while another thread is giving a large block's pages back (a free
// the cache does not keep, or the cache's own give-back as malloc_trim or
// the decay thread trims it): the child must get that block's room back.
// Before the fix the child inherited the extent (and, for a plain free, the
// free space around it) as used by nobody, for good: a block that needed
// the room went to mimalloc ("the large-block range is full") and the
// pages stayed committed. And in a child made by the freeing thread itself
// (a signal handler's fork), the counts of give-backs under way must be
// back at 0 once its copy of that thread has finished: mlockall waits for
// them.
//
// Deterministic, no timing: this program defines mmap, which lowtide's
// calls reach (an executable's definition comes first), and parks the
// freeing thread inside the re-mapping of the block's run (after the
// arena's lock was let go, before it is taken again) while the main thread
// forks. Run with LOWTIDE_RESERVE=64MiB, so that the child's 40 MiB block
// fits only where the freed one was.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lowtide/lowtide.h"

// Weak: the program runs under the preload (a missing library fails below).
extern int lowtide_get_stats(struct lowtide_stats* s) __attribute__((weak));

#define MIB ((size_t)1 << 20)
#define BLOCK (40 * MIB)

static _Atomic(uintptr_t) trap_at;  // park the first MAP_FIXED mmap of a run starting here
static atomic_int parked, release_it;
// Instead of parking, fork right there, as a signal handler on the freeing
// thread would: the child's copy of that thread finishes the give-back.
static atomic_int fork_inside;
static pid_t inside_child = -1;
static void child_checks(const char* name, uintptr_t where);

// lowtide's calls are to mmap64, glibc's other name for the same function
// (and a build with _FILE_OFFSET_BITS=64 renames mmap to it): both defined,
// by their symbol names.
void* lt_mmap64(void* addr, size_t len, int prot, int flags, int fd, long off) __asm__("mmap64");
void* lt_mmap(void* addr, size_t len, int prot, int flags, int fd, long off) __asm__("mmap");
void* lt_mmap64(void* addr, size_t len, int prot, int flags, int fd, long off) {
  const uintptr_t t = atomic_load(&trap_at);
  if (t != 0 && (flags & MAP_FIXED) != 0 && (uintptr_t)addr <= t && t < (uintptr_t)addr + len &&
      atomic_compare_exchange_strong(&trap_at, &(uintptr_t){t}, 0)) {
    if (atomic_load(&fork_inside) != 0) {
      const pid_t pid = fork();
      if (pid == 0) {
        void* r = (void*)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
        atomic_store(&fork_inside, 0);
        inside_child = 0;
        return r;  // back into the give-back, then child_checks (main)
      }
      inside_child = pid;
    } else {
      atomic_store(&parked, 1);
      while (atomic_load(&release_it) == 0) sched_yield();
    }
  }
  return (void*)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}
void* lt_mmap(void* addr, size_t len, int prot, int flags, int fd, long off) {
  return lt_mmap64(addr, len, prot, flags, fd, off);
}

static void* freer(void* p) {
  free(p);
  return NULL;
}

static void* trimmer(void* p) {
  (void)p;
  malloc_trim(0);
  return NULL;
}

static void fail(const char* what) {
  fprintf(stderr, "fork_give_back: %s\n", what);
  _exit(1);
}

// One scenario: thread `fn` parked inside the give-back of the block at p;
// the child then asks for a block of the same size, which fits only there.
// (The address as a number: the block may be freed already.)
static void scenario(const char* name, uintptr_t where, void* (*fn)(void*), void* arg) {
  atomic_store(&parked, 0);
  atomic_store(&release_it, 0);
  atomic_store(&trap_at, where);
  pthread_t t;
  if (pthread_create(&t, NULL, fn, arg) != 0) fail("pthread_create");
  while (atomic_load(&parked) == 0) sched_yield();
  const pid_t pid = fork();
  if (pid < 0) fail("fork");
  if (pid == 0) child_checks(name, where);
  atomic_store(&release_it, 1);
  pthread_join(t, NULL);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) fail("waitpid");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "fork_give_back: %s: child failed (status %d)\n", name, status);
    _exit(1);
  }
}

// In the child: a block of the freed one's size fits where it was, on the
// large path; and a second one does not overlap it (an extent released
// twice would be handed out twice).
static void child_checks(const char* name, uintptr_t where) {
  {
    struct lowtide_stats before = {.size = sizeof before}, after = {.size = sizeof after};
    lowtide_get_stats(&before);
    void* q = malloc(BLOCK);
    lowtide_get_stats(&after);
    if (q == NULL) _exit(2);
    memset(q, 1, BLOCK);
    // The freed block's room: the same place (the range's first fit), on
    // the large path, not mimalloc's.
    if ((uintptr_t)q != where || after.large_fallback != before.large_fallback) {
      fprintf(stderr, "fork_give_back: %s: the child's block went elsewhere (%p, not %#lx; fallbacks %llu)\n", name,
              q, (unsigned long)where, (unsigned long long)(after.large_fallback - before.large_fallback));
      _exit(3);
    }
    // Then 1 MiB blocks until the range is full (or the fallback), each
    // filled with its own byte: a run released twice is handed out twice
    // (or its free list loops: the alarm).
    alarm(20);
    unsigned char* r[64];
    int k = 0;
    for (; k < 64; ++k) {
      lowtide_get_stats(&before);
      r[k] = malloc(MIB);
      lowtide_get_stats(&after);
      if (r[k] == NULL) _exit(2);
      memset(r[k], 10 + k, MIB);
      if (after.large_fallback != before.large_fallback) break;
    }
    for (int i = 0; i < k; ++i)
      for (size_t j = 0; j < MIB; j += 4096)
        if (r[i][j] != 10 + i) {
          fprintf(stderr, "fork_give_back: %s: two of the child's blocks overlap\n", name);
          _exit(4);
        }
    for (size_t i = 0; i < BLOCK; i += 4096)
      if (((const char*)q)[i] != 1) {
        fprintf(stderr, "fork_give_back: %s: the child's blocks overlap its first one\n", name);
        _exit(4);
      }
    for (int i = 0; i <= k && i < 64; ++i) free(r[i]);
    free(q);
    // No give-back is under way here: mlockall, which waits for those under
    // way, returns (under the alarm). In the "own" child the counts went
    // below 0 once its copy of the forking thread had finished its
    // give-back, and mlockall waited for ever.
    if (mlockall(MCL_FUTURE) == 0) munlockall();
    _exit(0);
  }
}

int main(void) {
  if (lowtide_get_stats == NULL) fail("not under lowtide (LD_PRELOAD)");
  // A free the cache does not keep: LOWTIDE_CACHE=0 in the first run, and
  // in every run a block larger than the cache may hold is not kept.
  void* p = malloc(BLOCK);
  if (p == NULL) fail("malloc");
  memset(p, 7, BLOCK);
  const uintptr_t where = (uintptr_t)p;
  const char* cache = getenv("LOWTIDE_CACHE");
  if (cache != NULL && strcmp(cache, "0") == 0) {
    scenario("free", where, freer, p);
  } else {
    // Kept by the cache, then given back by malloc_trim on another thread.
    free(p);
    void* again = malloc(BLOCK);  // from the cache: the same block
    if ((uintptr_t)again != where) fail("the cache did not give the block back");
    free(again);
    scenario("cache give-back", where, trimmer, NULL);
  }
  // The freeing thread itself forks inside its give-back (a signal
  // handler's fork): the child must not give the extent back twice.
  p = malloc(BLOCK);
  if ((uintptr_t)p != where) fail("the block did not come back");
  memset(p, 7, BLOCK);
  void* keep = malloc(BLOCK / 4);  // the run is the block alone
  if (cache != NULL && strcmp(cache, "0") == 0) {
    atomic_store(&fork_inside, 1);
    atomic_store(&trap_at, where);
    free(p);
    if (inside_child == 0) child_checks("own", where);
    int status = 0;
    if (inside_child < 0 || waitpid(inside_child, &status, 0) != inside_child) fail("no child");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "fork_give_back: own: child failed (status %d)\n", status);
      _exit(1);
    }
  } else {
    free(p);
  }
  free(keep);
  // The parent gets its room back too.
  void* q = malloc(BLOCK);
  if ((uintptr_t)q != where) fail("the parent's block went elsewhere");
  free(q);
  puts("fork_give_back: ok");
  return 0;
}
