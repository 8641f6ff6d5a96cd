// Mixed large allocations from 4 threads (docs/benchmarks.md, "calloc from
// the reuse cache"): 64 slots per thread, each op frees or reallocs a slot
// or fills it by malloc, calloc or posix_memalign (4 KiB) with a size
// within 8 KiB of 4 KiB, 64 KiB, 128 KiB or 2 MiB, and writes the block's
// first and last byte (sparse use: a table, a buffer mostly unused).
// usage: mixed_large [ops per thread, default 200000]
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

static long ops = 200000;

static size_t pick(unsigned* r) {
  static const size_t base[] = {4096, 65536, 131072, 2u << 20};
  *r = *r * 1103515245u + 12345u;
  size_t b = base[(*r >> 16) % 4];
  long d = (long)((*r >> 8) % 1024) - 512;
  return b + d * 16;
}

static void* run(void* arg) {
  unsigned r = (unsigned)(size_t)arg;
  void* slots[64] = {0};
  for (long i = 0; i < ops; ++i) {
    r = r * 1103515245u + 12345u;
    int k = (r >> 10) % 64;
    int op = (r >> 20) % 5;
    if (slots[k]) {
      if (op == 0) {
        size_t n = pick(&r);
        void* q = realloc(slots[k], n);
        if (q) slots[k] = q;
        continue;
      }
      free(slots[k]);
      slots[k] = 0;
    }
    size_t n = pick(&r);
    void* p;
    if (op == 1) p = calloc(1, n);
    else if (op == 2) p = posix_memalign(&p, 4096, n) == 0 ? p : 0;
    else p = malloc(n);
    if (p) ((char*)p)[0] = 1, ((char*)p)[n - 1] = 2;
    slots[k] = p;
  }
  for (int k = 0; k < 64; ++k) free(slots[k]);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1) ops = atol(argv[1]);
  pthread_t t[4];
  for (int i = 0; i < 4; ++i) pthread_create(&t[i], 0, run, (void*)(size_t)(i + 1));
  for (int i = 0; i < 4; ++i) pthread_join(t[i], 0);
  return 0;
}
