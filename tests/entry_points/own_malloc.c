// An executable with its own malloc, free, calloc and realloc (the four
// functions glibc's manual asks of a replacement allocator), run with
// LD_PRELOAD=liblowtide.so: lowtide must forward to it (docs/design.md,
// "Forwarding"), and the functions this program does not define must reach
// what they reach without lowtide (glibc's), not lowtide's own entry point
// again: that forwarded to itself and spun forever (reliability.md no. 28).
#define _GNU_SOURCE
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char* heap;
static size_t used;
static size_t served;  // blocks this allocator made

static void* bump(size_t n) {
  if (heap == NULL) {
    heap = mmap(NULL, (size_t)1 << 28, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (heap == MAP_FAILED) abort();
  }
  n = (n + 31) & ~(size_t)31;
  if (used + n + 32 > ((size_t)1 << 28)) return NULL;
  char* p = heap + used + 32;
  memcpy(p - 16, &n, sizeof n);
  used += n + 32;
  ++served;
  return p;
}
void* malloc(size_t n) { return bump(n); }
void free(void* p) { (void)p; }
void* calloc(size_t a, size_t b) { return b != 0 && a > SIZE_MAX / b ? NULL : bump(a * b); }  // fresh pages are zero
void* realloc(void* p, size_t n) {
  void* q = bump(n);
  if (p != NULL && q != NULL) {
    size_t o;
    memcpy(&o, (char*)p - 16, sizeof o);
    memcpy(q, p, o < n ? o : n);
  }
  return q;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "own_malloc: a call did not return in 20 s\n";
  (void)!write(2, m, sizeof m - 1);
  _exit(3);
}

static int aligned(const void* p, size_t a) { return p != NULL && ((uintptr_t)p & (a - 1)) == 0; }

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(20);
  void* p = malloc(100);
  if (served == 0) {
    fprintf(stderr, "own_malloc: malloc did not reach the program's own\n");
    return 1;
  }
  void* q = NULL;
  int failed = 0;
  if (posix_memalign(&q, 64, 100) != 0 || !aligned(q, 64)) failed |= 1;
  if (!aligned(aligned_alloc(4096, 8192), 4096)) failed |= 2;
  if (!aligned(memalign(256, 300), 256)) failed |= 4;
  if (!aligned(valloc(10), 4096)) failed |= 8;
  (void)malloc_usable_size(p);
  (void)malloc_trim(0);
  if (mallopt(M_TRIM_THRESHOLD, 1 << 20) != 1) failed |= 16;
  if (failed != 0) {
    fprintf(stderr, "own_malloc: failed checks %#x\n", failed);
    return 1;
  }
  printf("own_malloc: every call returned (%zu blocks from the program's malloc)\n", served);
  return 0;
}
