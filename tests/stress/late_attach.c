// Threads whose first allocation comes in the last round of pthread key
// destructors (another key's destructor sets itself again three times and
// allocates only in the fourth): glibc runs at most
// PTHREAD_DESTRUCTOR_ITERATIONS rounds, so the key lowtide sets at that
// first call never has its destructor run. Their slots stayed on the
// living list for good (a row "alive" in every report, never recycled),
// and their caches, opened by 300 frees, kept their blocks (before the
// fix: 51 rows alive, 140 KiB cached here). Later thread starts must
// settle them: one row alive (main's) and nothing cached once main's own
// cache is given back.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lowtide/lowtide.h"

extern int lowtide_get_stats(struct lowtide_stats* s) __attribute__((weak));
extern int lowtide_write_report(const char* path, int format) __attribute__((weak));
extern size_t lowtide_release(void) __attribute__((weak));

static pthread_key_t key;

static void late_dtor(void* v) {
  const intptr_t round = (intptr_t)v;
  if (round < 4) {
    pthread_setspecific(key, (void*)(round + 1));
    return;
  }
  void* b[300];
  for (int i = 0; i < 300; ++i) {
    b[i] = malloc(64);
    if (b[i] == NULL) abort();
    memset(b[i], 7, 64);
  }
  for (int i = 0; i < 300; ++i) free(b[i]);
}

static void* late_worker(void* unused) {
  (void)unused;
  pthread_setspecific(key, (void*)(intptr_t)1);
  return NULL;
}

static void* plain_worker(void* unused) {
  (void)unused;
  void* p = malloc(24);
  if (p == NULL) abort();
  memset(p, 1, 24);
  free(p);
  return NULL;
}

static void run(void* (*f)(void*)) {
  pthread_t t;
  if (pthread_create(&t, NULL, f, NULL) != 0 || pthread_join(t, NULL) != 0) {
    fprintf(stderr, "late_attach: pthread_create/join failed\n");
    exit(2);
  }
}

// Rows "alive" in a JSON report written now.
static int alive_rows(void) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/lowtide-late-attach-%d.json", (int)getpid());
  if (lowtide_write_report(path, LOWTIDE_REPORT_JSON) != 0) {
    perror("late_attach: lowtide_write_report");
    exit(2);
  }
  FILE* f = fopen(path, "r");
  if (f == NULL) exit(2);
  static char buf[1 << 20];
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  unlink(path);
  buf[n] = '\0';
  int rows = 0;
  for (const char* p = buf; (p = strstr(p, "\"alive\": true")) != NULL; ++p) ++rows;
  return rows;
}

int main(void) {
  alarm(60);
  if (lowtide_get_stats == NULL || lowtide_write_report == NULL || lowtide_release == NULL) {
    fprintf(stderr, "late_attach: lowtide's API not found: is liblowtide.so preloaded?\n");
    return 2;
  }
  if (pthread_key_create(&key, late_dtor) != 0) return 2;
  for (int i = 0; i < 50; ++i) run(late_worker);
  // Each start looks at one living slot: enough starts for every one to
  // be looked at several times, long after its thread was joined.
  for (int i = 0; i < 400; ++i) run(plain_worker);
  lowtide_release();  // main's own cache and the shelves
  struct lowtide_stats s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  if (lowtide_get_stats(&s) != 0) return 2;
  const int alive = alive_rows();
  int bad = 0;
  if (alive != 1) {
    fprintf(stderr, "FAIL: %d rows alive after every thread but main was joined (want 1)\n", alive);
    bad = 1;
  }
  if (s.small_thread_cached != 0) {
    fprintf(stderr, "FAIL: %llu bytes still in thread caches (want 0)\n", (unsigned long long)s.small_thread_cached);
    bad = 1;
  }
  if (!bad) printf("late_attach: ok (%llu rows)\n", (unsigned long long)s.threads);
  return bad;
}
