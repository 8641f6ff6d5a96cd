/* A signal handler that forks at the edges of its own thread's capture:
 * after the capture marked itself (ThreadLocal::in_capture) and before it
 * counted itself in flight (sites.cpp's `capturing`), or after it took
 * itself off the count and before it unmarked itself.
 * sites_fork_in_capture.c raises its signal from calls lowtide makes;
 * nothing is called between those two steps, so here the thread
 * single-steps (x86-64's trap flag, set by a SIGUSR2 handler) and the
 * SIGTRAP handler forks at the instruction: right before the first locked
 * write to the count (start), or right after the write that took it down
 * (end; the SIGUSR2 is raised from strcmp, which a new site's insert calls
 * with signals blocked, and comes when they are unblocked). The count's
 * address is read from liblowtide's symbol table (SKIP without one). The
 * child, whose capture then goes on, must be left with no capture counted:
 * a later fork there must not wait (nanosleep, defined here, counts the
 * waits of its fork handlers). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "fork_in_child.h"

#if defined(__x86_64__)
static volatile sig_atomic_t mode;  /* 1: end (step from strcmp), 2: start (step from main) */
static volatile sig_atomic_t armed; /* strcmp raises SIGUSR2 */
static __thread long sleeps;
static uintptr_t lt_lo, lt_hi;
static uintptr_t counter;            /* the capture count's address */
static uintptr_t prev_rip;
static int prev_count;
static long steps;
static pid_t child = -1;
static int (*real_find)(void*, struct dl_find_object*);

static int in_lt(uintptr_t a) { return a - lt_lo < lt_hi - lt_lo; }

/* The third case: another thread's capture held in _dl_find_object. */
static volatile sig_atomic_t hold_find, held, release_it;
static __thread int releaser; /* main: lowtide's own threads sleep too */

int _dl_find_object(void* pc, struct dl_find_object* r) {
  if (hold_find && in_lt((uintptr_t)__builtin_return_address(0))) {
    hold_find = 0;
    held = 1;
    while (!release_it) {
    }
  }
  if (real_find == NULL) {
    void* p = dlvsym(RTLD_NEXT, "_dl_find_object", "GLIBC_2.35");
    memcpy(&real_find, &p, sizeof p);
  }
  return real_find(pc, r);
}

int nanosleep(const struct timespec* req, struct timespec* rem) {
  ++sleeps;
  if (releaser) release_it = 1;  /* a fork handler waits: the other thread's capture may end */
  return (int)syscall(SYS_nanosleep, req, rem);
}

int strcmp(const char* a, const char* b) {
  if (armed && in_lt((uintptr_t)__builtin_return_address(0))) {
    armed = 0;
    raise(SIGUSR2);  /* pending: the table's lock is held with signals blocked */
  }
  const unsigned char *x = (const unsigned char*)a, *y = (const unsigned char*)b;
  while (*x != 0 && *x == *y) ++x, ++y;
  return *x - *y;
}

static void on_usr2(int sig, siginfo_t* si, void* uc) {
  (void)sig, (void)si;
  ucontext_t* u = uc;
  prev_rip = 0;
  prev_count = *(volatile int*)counter;
  steps = 0;
  u->uc_mcontext.gregs[REG_EFL] |= 0x100;
}

/* A locked read-modify-write of a RIP-relative operand at p (prefix f0, a
 * REX, a one- or two-byte opcode, mod 00 r/m 101): its target, else 0. */
static uintptr_t locked_target(uintptr_t p) {
  if (!in_lt(p)) return 0;
  const unsigned char* i = (const unsigned char*)p;
  if (*i++ != 0xf0) return 0;
  if ((*i & 0xf0) == 0x40) ++i;
  unsigned op = *i++;
  if (op == 0x0f) op = 0x0f00 | *i++;
  if ((*i++ & 0xc7) != 0x05) return 0;
  int32_t d;
  memcpy(&d, i, 4);
  i += 4;
  if (op == 0x83) i += 1;
  else if (op == 0x81) i += 4;
  return (uintptr_t)i + (intptr_t)d;
}

static void on_trap(int sig, siginfo_t* si, void* uc) {
  (void)sig, (void)si;
  ucontext_t* u = uc;
  uintptr_t rip = (uintptr_t)u->uc_mcontext.gregs[REG_RIP];
  int now = *(volatile int*)counter;
  int fork_now = 0;
  if (mode == 1) {
    fork_now = prev_rip != 0 && in_lt(prev_rip) && now < prev_count;
  } else if (mode == 2) {
    fork_now = locked_target(rip) == counter;
  }
  prev_rip = rip;
  prev_count = now;
  if (fork_now || ++steps > 5000000) {
    u->uc_mcontext.gregs[REG_EFL] &= ~0x100LL;
    if (fork_now) child = fork();
  }
}

/* The address of sites' `capturing` in liblowtide (loaded at base), from
 * its .symtab: 0 if it has none. */
static uintptr_t find_counter(const char* path, uintptr_t base) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 0;
  struct stat st;
  uintptr_t found = 0;
  if (fstat(fd, &st) == 0) {
    const char* f = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f != MAP_FAILED) {
      const Elf64_Ehdr* eh = (const Elf64_Ehdr*)f;
      const Elf64_Shdr* sh = (const Elf64_Shdr*)(f + eh->e_shoff);
      for (int k = 0; k < eh->e_shnum && found == 0; ++k) {
        if (sh[k].sh_type != SHT_SYMTAB) continue;
        const Elf64_Sym* sym = (const Elf64_Sym*)(f + sh[k].sh_offset);
        const char* names = f + sh[sh[k].sh_link].sh_offset;
        size_t n = sh[k].sh_size / sizeof *sym;
        for (size_t j = 0; j < n; ++j) {
          const char* nm = names + sym[j].st_name;
          if (strstr(nm, "5sites") != NULL && strstr(nm, "9capturingE") != NULL) {
            found = base + sym[j].st_value;
            break;
          }
        }
      }
      munmap((void*)f, (size_t)st.st_size);
    }
  }
  close(fd);
  return found;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL: timed out\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
  _exit(1);
}

static void* volatile keep;
static void* (*volatile alloc)(size_t) = malloc;
__attribute__((noinline)) static void warm(void) { keep = alloc(1 << 20); free(keep); }
__attribute__((noinline)) static void at_end(void) { keep = alloc(1 << 20); free(keep); }
__attribute__((noinline)) static void at_start(void) { keep = alloc(1 << 20); free(keep); }
__attribute__((noinline)) static void at_start2(void) { keep = alloc(1 << 20); free(keep); }
static void* other(void* arg) {
  (void)arg;
  void* b = alloc((1 << 20) + 4096);
  free(b);
  return NULL;
}

static int child_checks(const char* name) { return fork_in_child_ok(name, &sleeps); }

static int finish(const char* name) {
  if (child < 0) {
    fprintf(stderr, "SKIP: %s: no fork at the capture's edge (another instruction encoding?)\n", name);
    return 77;
  }
  if (child == 0) _exit(child_checks(name));
  int st = 0;
  if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "FAIL: %s: the child failed (status %#x)\n", name, st);
    return 1;
  }
  printf("%s: ok\n", name);
  return 0;
}

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(100);
  void* p = dlvsym(RTLD_NEXT, "_dl_find_object", "GLIBC_2.35");
  memcpy(&real_find, &p, sizeof p);
  struct dl_find_object lt;
  Dl_info info;
  void* m;
  void* (*mf)(size_t) = malloc;
  memcpy(&m, &mf, sizeof m);
  if (real_find == NULL || real_find(m, &lt) != 0 || dladdr(m, &info) == 0 || info.dli_fname == NULL ||
      strstr(info.dli_fname, "liblowtide") == NULL) {
    fprintf(stderr, "SKIP: not under lowtide\n");
    return 77;
  }
  lt_lo = (uintptr_t)lt.dlfo_map_start;
  lt_hi = (uintptr_t)lt.dlfo_map_end;
  counter = find_counter(info.dli_fname, (uintptr_t)info.dli_fbase);
  if (counter == 0) {
    fprintf(stderr, "SKIP: no symbol table in liblowtide (sites' capturing not found)\n");
    return 77;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_usr2;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGUSR2, &sa, NULL);
  sa.sa_sigaction = on_trap;
  sigaction(SIGTRAP, &sa, NULL);
  warm();
  mode = 1;
  armed = 1;
  at_end();
  armed = 0;
  int rc = finish("end");
  if (rc != 0) return rc;
  child = -1;
  mode = 2;
  raise(SIGUSR2);
  at_start();
  rc = finish("start");
  if (rc != 0) return rc;
  /* Another thread's capture in flight (held in _dl_find_object): the
   * handler's fork at the start of its own must wait for it. */
  child = -1;
  release_it = 0;
  held = 0;
  hold_find = 1;
  pthread_t th;
  if (pthread_create(&th, NULL, other, NULL) != 0) return 1;
  while (!held) {
  }
  long before = sleeps;
  releaser = 1;
  raise(SIGUSR2);
  at_start2();
  releaser = 0;
  long waited = sleeps - before;
  release_it = 1;
  pthread_join(th, NULL);
  if (child > 0 && waited == 0) {
    fprintf(stderr, "FAIL: other: the handler's fork did not wait for another thread's capture\n");
    finish("other");
    return 1;
  }
  return finish("other");
}
#else
int main(void) {
  fprintf(stderr, "SKIP: x86-64 only\n");
  return 77;
}
#endif
