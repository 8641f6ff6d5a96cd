/* A large malloc that succeeds leaves errno as it was, with call sites on
 * (LOWTIDE_SITES, every large block captured): the capture's unwinding
 * (libunwind drains the pipe it checks addresses with: read() ends in
 * EAGAIN) must not show through. Each allocation its own new site; a
 * realloc's growth captured too; the signal mask kept as well. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static void* volatile keep;
static void* (*volatile alloc)(size_t) = malloc;
static void* (*volatile grow)(void*, size_t) = realloc;

__attribute__((noinline)) static void a(void) { keep = alloc(1 << 20); }
__attribute__((noinline)) static void b(void) { keep = alloc(2 << 20); }
__attribute__((noinline)) static void c(void) { keep = alloc(3 << 20); }
__attribute__((noinline)) static void d(void) { keep = grow(keep, 8 << 20); }

int main(void) {
  sigset_t s, after;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  sigprocmask(SIG_SETMASK, &s, NULL);
  void (*steps[])(void) = {a, b, c, d};
  int bad = 0;
  for (unsigned i = 0; i < sizeof steps / sizeof *steps; ++i) {
    errno = 1234;
    steps[i]();
    int e = errno;
    if (keep == NULL) {
      fprintf(stderr, "FAIL: step %u: the allocation failed\n", i);
      return 1;
    }
    if (e != 1234) {
      fprintf(stderr, "FAIL: step %u: errno %d after a large allocation that succeeded\n", i, e);
      bad = 1;
    }
    sigprocmask(SIG_SETMASK, NULL, &after);
    if (!sigismember(&after, SIGUSR1) || sigismember(&after, SIGUSR2)) {
      fprintf(stderr, "FAIL: step %u: the signal mask changed\n", i);
      bad = 1;
    }
  }
  free(keep);
  if (!bad) printf("ok\n");
  return bad;
}
