// The live server when a large allocation comes while a working thread's
// exit is starting the decay thread (cache::note_thread_exit: the server
// deferred to the next large allocation). That allocation found the
// thread started but no deferral yet recorded (or waited for the start
// lock and found the thread started), so it started no server, and a
// program that makes no further large allocation never had one: no
// `lowtide stats PID`. Made certain here: this program's pthread_create
// (which lowtide's start calls; it interposes glibc's) waits 300 ms when
// called on the exiting worker, and main's large allocation comes in
// that while. Before the fix: no lowtide-live thread, ever.
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int worker_tid, in_start;

typedef int (*create_fn)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

int pthread_create(pthread_t* t, const pthread_attr_t* a, void* (*f)(void*), void* arg) {
  static create_fn real;
  if (real == NULL) {
    /* dlsym returns an object pointer; ISO C has no cast to a function
       pointer, POSIX guarantees the representation: copy it. */
    void* sym = dlsym(RTLD_NEXT, "pthread_create");
    memcpy(&real, &sym, sizeof real);
  }
  if (atomic_load(&worker_tid) == (int)syscall(SYS_gettid)) {
    atomic_store(&in_start, 1);
    usleep(300 * 1000);
  }
  return real(t, a, f, arg);
}

enum { kBlocks = 8 * 1024 * 1024 / 256 };
static void* blocks[kBlocks];

static void* worker(void* unused) {
  (void)unused;
  for (int i = 0; i < kBlocks; ++i) {
    blocks[i] = malloc(256);
    memset(blocks[i], 1, 256);
  }
  for (int i = 0; i < kBlocks; ++i) free(blocks[i]);
  atomic_store(&worker_tid, (int)syscall(SYS_gettid));
  return NULL;
}

static int thread_named(const char* want) {
  DIR* d = opendir("/proc/self/task");
  int found = 0;
  struct dirent* e;
  while (d != NULL && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], name[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(name, sizeof name, f) != NULL && strncmp(name, want, strlen(want)) == 0) found = 1;
    fclose(f);
  }
  if (d != NULL) closedir(d);
  return found;
}

static int appears(const char* name) {
  for (int i = 0; i < 300; ++i) {
    if (thread_named(name)) return 1;
    usleep(10 * 1000);
  }
  return 0;
}

int main(void) {
  if (getenv("LOWTIDE_TEST_LIB") == NULL) {
    fprintf(stderr, "FAIL: LOWTIDE_TEST_LIB is not set; this test needs liblowtide preloaded\n");
    return 1;
  }
  alarm(60);
  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
  for (int i = 0; i < 1000 && !atomic_load(&in_start); ++i) usleep(10 * 1000);
  if (!atomic_load(&in_start)) {
    fprintf(stderr, "FAIL: the worker's exit did not start the decay thread\n");
    return 1;
  }
  usleep(50 * 1000);  // well inside the start's 300 ms
  char* volatile big = malloc(8 << 20);
  memset(big, 2, 8 << 20);
  free(big);
  pthread_join(t, NULL);
  int ok = 1;
  if (!appears("lowtide-decay")) {
    fprintf(stderr, "FAIL: no lowtide-decay thread\n");
    ok = 0;
  }
  if (!appears("lowtide-live")) {
    fprintf(stderr, "FAIL: a large allocation during an exit's start: no lowtide-live thread\n");
    ok = 0;
  }
  if (ok) printf("PASS live_exit_race\n");
  return ok ? 0 : 1;
}
