// A finite RLIMIT_DATA set on the process from outside (prlimit --pid, or
// another process's prlimit(pid, RLIMIT_DATA, ...)) is obeyed by large
// blocks as one the program sets itself (reliability.md no. 118). lowtide
// read the limit only at start-up and after the program's own setrlimit/
// prlimit; commits over its range, MAP_FIXED mmaps the kernel does not
// check against the limit (no. 109), went on unchecked: malloc(512 MiB)
// under a limit 64 MiB above VmData got a pointer for as long as the
// program ran, where glibc gets NULL.
//
// Here: a child (preloaded as this process) makes an 8 MiB block, which
// starts the decay thread, and tells its parent its VmData; the parent sets
// the child's soft limit 64 MiB above it with prlimit(child, ...), then
// says so. The child then asks malloc(512 MiB) until it is NULL with ENOMEM,
// for at most 5 s (the decay thread re-reads the limit within about a
// second); a pointer got meanwhile is freed and given back (malloc_trim, so
// the next ask commits afresh rather than take it from the cache). Then a
// 16 MiB block, within the limit, must still be served.
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "large_reused.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int child(int to_parent, int from_parent) {
  const size_t mib = (size_t)1 << 20;
  char* block = malloc(8 * mib);
  if (block == NULL) return 1;
  memset(block, 0x5a, 8 * mib);
  long vmdata = status_kib("VmData");
  if (write(to_parent, &vmdata, sizeof vmdata) != (ssize_t)sizeof vmdata) return 1;
  char go;
  if (read(from_parent, &go, 1) != 1) return 1;
  if (go != 'y') return 77;  // the parent skipped
  struct rlimit lim;
  if (getrlimit(RLIMIT_DATA, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) {
    fprintf(stderr, "data_limit_outside: the child's limit was not set\n");
    return 1;
  }
  // Bounded: 5 s is several times the decay thread's idle tick (1 s).
  const double start = now_s();
  int tries = 0, refused = 0, null = 0, err = 0;
  while (now_s() - start < 5.0) {
    ++tries;
    errno = 0;
    char* huge = malloc(512 * mib);
    err = errno;
    if (huge == NULL) {
      null = 1;
      refused = err == ENOMEM;
      break;
    }
    free(huge);
    malloc_trim(0);
    const struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  int bad = 0;
  if (!refused) {
    fprintf(stderr,
            "data_limit_outside: malloc(512 MiB) under a limit 64 MiB above VmData set from outside: %s after %d "
            "tries in %.1f s (errno %d); want NULL with ENOMEM\n",
            null ? "NULL" : "a pointer", tries, now_s() - start, err);
    bad = 1;
  } else {
    fprintf(stderr, "data_limit_outside: malloc(512 MiB) NULL with ENOMEM after %d tries (%.2f s)\n", tries,
            now_s() - start);
  }
  errno = 0;
  char* within = malloc(16 * mib);
  if (within == NULL) {
    fprintf(stderr, "data_limit_outside: malloc(16 MiB) within the limit: NULL (errno %d)\n", errno);
    bad = 1;
  } else {
    memset(within, 1, 16 * mib);
    free(within);
  }
  free(block);
  return bad;
}

int main(void) {
  struct lowtide_stats st;
  lowtide_stats_now("data_limit_outside", &st);  // exits 2 unless under lowtide
  struct rlimit old;
  if (getrlimit(RLIMIT_DATA, &old) != 0) return 1;
  if (old.rlim_cur != RLIM_INFINITY) {
    printf("data_limit_outside: RLIMIT_DATA already finite here: skipped\n");
    return 77;
  }
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) return 1;
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    _exit(child(up[1], down[0]));
  }
  close(up[1]);
  close(down[0]);
  long vmdata = -1;
  const int got = read(up[0], &vmdata, sizeof vmdata) == (ssize_t)sizeof vmdata;
  char go = 'n';
  int rc = 1;
  if (got && vmdata < 0) {
    printf("data_limit_outside: no VmData in /proc/self/status: skipped\n");
    rc = 77;
  } else if (got) {
    struct rlimit lim = old;
    lim.rlim_cur = ((rlim_t)vmdata << 10) + ((rlim_t)64 << 20);
    if (prlimit(pid, RLIMIT_DATA, &lim, NULL) == 0) {
      go = 'y';
      rc = 0;
    } else {
      perror("data_limit_outside: prlimit(child)");
    }
  }
  if (write(down[1], &go, 1) != 1) rc = 1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return 1;
  if (rc != 0) return rc;
  if (!WIFEXITED(status)) {
    fprintf(stderr, "data_limit_outside: the child ended by signal %d\n", WTERMSIG(status));
    return 1;
  }
  if (WEXITSTATUS(status) != 0) return WEXITSTATUS(status);
  printf("data_limit_outside: ok\n");
  return 0;
}
