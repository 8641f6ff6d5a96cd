/* A child of _Fork (glibc 2.34+: no fork handlers run) made while another
 * thread of the parent holds the site table's lock (LOWTIDE_SITES, every
 * large block captured). That thread does not exist in the child, so the
 * lock stays taken there for good: the child's first capture of a new site
 * waited for it for ever (in pthread_mutex_lock, every signal blocked), and
 * so did its first fork (sites::fork_prepare takes the lock), after waiting
 * 2 s for the other thread's capture, still counted in flight.
 *
 * The window is made certain: lowtide calls strcmp (comparing module paths)
 * with the table's lock held, and this program defines strcmp (export_dynamic:
 * lowtide's call binds to it). A second thread's capture of a new site stops
 * there until the main thread has called _Fork. In the child: a large block
 * from a new stack (it must get a pointer and be freed), then a fork (it
 * must not wait: nanosleep, defined here too, counts the waits of the fork
 * handlers) whose child exits at once. The parent gives the child 20 s and
 * kills it after: a hang is a failure, not a hung test. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fork_in_child.h"

static atomic_int armed;    /* 1: the next strcmp from lowtide stops */
static atomic_int held;     /* the second thread is stopped there */
static atomic_int released; /* ... and may go on */
static __thread long sleeps;
static uintptr_t lt_lo, lt_hi; /* liblowtide's mapping */

static int from_lowtide(void* ret) { return (uintptr_t)ret - lt_lo < lt_hi - lt_lo; }

int nanosleep(const struct timespec* req, struct timespec* rem) {
  ++sleeps;
  return (int)syscall(SYS_nanosleep, req, rem);
}

int strcmp(const char* a, const char* b) {
  int one = 1;
  if (from_lowtide(__builtin_return_address(0)) && atomic_compare_exchange_strong(&armed, &one, 0)) {
    atomic_store(&held, 1);
    while (!atomic_load(&released)) syscall(SYS_sched_yield);
  }
  const unsigned char *x = (const unsigned char*)a, *y = (const unsigned char*)b;
  while (*x != 0 && *x == *y) ++x, ++y;
  return *x - *y;
}

static void* volatile keep;
static void* (*volatile alloc)(size_t) = malloc;

/* Each its own stack, so each capture is a new site. */
__attribute__((noinline)) static void warm(void) { keep = alloc(1 << 20); free(keep); }
__attribute__((noinline)) static void in_lock(void) { keep = alloc(1 << 20); free(keep); }
__attribute__((noinline)) static int in_child(void) {
  void* p = alloc(1 << 20);
  if (p == NULL) return 1;
  memset(p, 1, 1 << 20);
  free(p);
  return 0;
}

static void* holder(void* arg) {
  (void)arg;
  in_lock();
  return NULL;
}

static void* code_address(void* (*fn)(size_t)) {
  void* p;
  memcpy(&p, &fn, sizeof p);
  return p;
}

int main(void) {
  int (*find)(void*, struct dl_find_object*) = NULL;
  void* f = dlvsym(RTLD_NEXT, "_dl_find_object", "GLIBC_2.35");
  memcpy(&find, &f, sizeof f);
  struct dl_find_object lt;
  Dl_info info;
  void* m = code_address(malloc);
  if (find == NULL || find(m, &lt) != 0 || dladdr(m, &info) == 0 || info.dli_fname == NULL ||
      strstr(info.dli_fname, "liblowtide") == NULL) {
    fprintf(stderr, "SKIP: not under lowtide\n");
    return 77;
  }
  lt_lo = (uintptr_t)lt.dlfo_map_start;
  lt_hi = (uintptr_t)lt.dlfo_map_end;
  warm(); /* this program's and libc's modules known: a new site's frames compare paths */
  {
    atomic_store(&armed, 1);
    pthread_t t;
    if (pthread_create(&t, NULL, holder, NULL) != 0) return 1;
    for (int i = 0; i < 10000 && !atomic_load(&held); ++i) usleep(1000);
    if (!atomic_load(&held)) {
      fprintf(stderr, "FAIL: no strcmp from lowtide under the table's lock (is LOWTIDE_SITES on?)\n");
      return 1;
    }
    pid_t c = _Fork();
    if (c == 0) {
      if (in_child() != 0) _exit(2);
      _exit(fork_in_child_ok("_Fork child", &sleeps) != 0 ? 3 : 0);
    }
    atomic_store(&released, 1);
    pthread_join(t, NULL);
    if (c < 0) {
      perror("_Fork");
      return 1;
    }
    int st = 0;
    pid_t w = 0;
    for (int i = 0; i < 2000 && (w = waitpid(c, &st, WNOHANG)) == 0; ++i) usleep(10000);
    if (w == 0) {
      kill(c, SIGKILL);
      waitpid(c, &st, 0);
      fprintf(stderr, "FAIL: the _Fork child hung (killed after 20 s)\n");
      return 1;
    }
    if (w != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "FAIL: the _Fork child failed (status %#x)\n", st);
      return 1;
    }
  }
  printf("ok\n");
  return 0;
}
