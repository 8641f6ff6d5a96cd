/* A signal handler that forks while its own thread is capturing a call
 * site (LOWTIDE_SITES, every large block captured). fork's prepare handler
 * waits for the captures in flight (libunwind and the site table must not
 * be left half-way in the child) and then takes the site table's lock; the
 * capture the handler interrupted is the forking thread's own: it cannot
 * end while the handler runs, so the wait is for nothing, and when the
 * capture held the table's lock the fork waited for it for ever.
 *
 * The signal is raised from inside the capture, at a call lowtide makes
 * that this program defines (lowtide's calls bind to the program's
 * definitions first): `find` from _dl_find_object, which a capture calls for
 * the frames of a new site, `lock` from strcmp, which it calls with the
 * table's lock held (comparing module paths). The handler forks; nanosleep,
 * defined here too, counts the waits of this thread's fork handlers. Each
 * fork must wait for nothing, in the parent as in the child, where the
 * interrupted capture goes on and must not leave a capture counted (a later
 * fork there waited 2 s for it). Every wait is bounded by alarm(). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fork_in_child.h"

static volatile sig_atomic_t armed; /* 1: raise at _dl_find_object, 2: at strcmp */
static volatile sig_atomic_t raised;
static __thread long sleeps;        /* nanosleep calls on this thread */
static long handler_sleeps = -1;
static pid_t handler_child = -1;
static uintptr_t lt_lo, lt_hi;      /* liblowtide's mapping */
static int (*real_find)(void*, struct dl_find_object*);

/* Pointers between code and data without -Wpedantic's complaint. */
static void find_real(void) {
  void* p = dlvsym(RTLD_NEXT, "_dl_find_object", "GLIBC_2.35");
  memcpy(&real_find, &p, sizeof p);
}

static void* code_address(void* (*fn)(size_t)) {
  void* p;
  memcpy(&p, &fn, sizeof p);
  return p;
}

static int from_lowtide(void* ret) { return (uintptr_t)ret - lt_lo < lt_hi - lt_lo; }

int nanosleep(const struct timespec* req, struct timespec* rem) {
  ++sleeps;
  return (int)syscall(SYS_nanosleep, req, rem);
}

int _dl_find_object(void* pc, struct dl_find_object* r) {
  if (armed == 1 && from_lowtide(__builtin_return_address(0))) {
    armed = 0;
    raise(SIGUSR1);
  }
  if (real_find == NULL) find_real();
  return real_find(pc, r);
}

int strcmp(const char* a, const char* b) {
  if (armed == 2 && from_lowtide(__builtin_return_address(0))) {
    armed = 0;
    raise(SIGUSR1);
  }
  const unsigned char *x = (const unsigned char*)a, *y = (const unsigned char*)b;
  while (*x != 0 && *x == *y) ++x, ++y;
  return *x - *y;
}

static void on_usr1(int sig) {
  (void)sig;
  raised = 1;
  long before = sleeps;
  pid_t p = fork();
  handler_sleeps = sleeps - before;
  handler_child = p;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL: timed out (a fork waiting for a capture of its own thread)\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
  _exit(1);
}

static void* volatile keep;
static void* (*volatile alloc)(size_t) = malloc;

/* Each its own stack, so each capture is a new site. */
__attribute__((noinline)) static void warm(void) { keep = alloc(1 << 20); free(keep); }
__attribute__((noinline)) static void in_find(void) { keep = alloc(1 << 20); free(keep); }
__attribute__((noinline)) static void in_lock(void) { keep = alloc(1 << 20); free(keep); }
__attribute__((noinline)) static void after(void) { keep = alloc(1 << 20); free(keep); }

/* In the child the handler made: the interrupted capture has ended; a fork
 * from here waits for nothing, and captures still work. */
static int child_checks(const char* mode) {
  if (fork_in_child_ok(mode, &sleeps) != 0) return 1;
  after();
  return 0;
}

static int run(const char* mode, int how, void (*fn)(void)) {
  raised = 0;
  handler_sleeps = -1;
  handler_child = -1;
  armed = how;
  fn();
  armed = 0;
  if (!raised) {
    fprintf(stderr, "FAIL: %s: no signal raised inside the capture (is LOWTIDE_SITES on?)\n", mode);
    return 1;
  }
  if (handler_child == 0) _exit(child_checks(mode));
  int st = 0;
  if (handler_child < 0 || waitpid(handler_child, &st, 0) != handler_child) {
    fprintf(stderr, "FAIL: %s: the handler's fork failed\n", mode);
    return 1;
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "FAIL: %s: the child failed (status %#x)\n", mode, st);
    return 1;
  }
  if (handler_sleeps != 0) {
    fprintf(stderr, "FAIL: %s: the handler's fork made %ld waits for its own thread's capture\n", mode,
            handler_sleeps);
    return 1;
  }
  printf("%s: ok\n", mode);
  return 0;
}

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(60);
  find_real();
  struct dl_find_object lt;
  Dl_info info;
  void* m = code_address(malloc);
  if (real_find == NULL || real_find(m, &lt) != 0 || dladdr(m, &info) == 0 ||
      info.dli_fname == NULL || strstr(info.dli_fname, "liblowtide") == NULL) {
    fprintf(stderr, "SKIP: not under lowtide\n");
    return 77;
  }
  lt_lo = (uintptr_t)lt.dlfo_map_start;
  lt_hi = (uintptr_t)lt.dlfo_map_end;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  warm();
  int rc = run("find", 1, in_find);
  if (rc == 0) rc = run("lock", 2, in_lock);
  return rc;
}
