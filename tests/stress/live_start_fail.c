/* A start whose thread creation fails leaves no listening socket behind.
 * In a process with no other thread the allocating thread makes the live
 * server's socket before it creates the decay thread (live::prepare), so
 * each way the start can fail must close it: the decay thread's
 * pthread_create failing (prepare(false)), and the server's failing after
 * the decay thread's succeeded (live::start). Each case is a forked child
 * that becomes an otherwise unused uid, limited by RLIMIT_NPROC to 1 task
 * (no thread at all), 2 (the decay thread only) or unlimited (the control:
 * both threads and the socket), then makes a large allocation and lists
 * its threads and its sockets. Needs root (setuid, and RLIMIT_NPROC does
 * not bind root); without it the test says so (exit 77, meson's skip). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kUid = 43917 }; /* nobody else's: the limit counts this uid's tasks */

static int count(const char* dir, int sockets_only) {
  DIR* d = opendir(dir);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d)) continue;
    if (!sockets_only) {
      ++n;
      continue;
    }
    char path[300], target[64];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    const ssize_t r = readlink(path, target, sizeof target - 1);
    if (r <= 0) continue;
    target[r] = '\0';
    if (strncmp(target, "socket:", 7) == 0 && atoi(e->d_name) > 2) ++n;
  }
  closedir(d);
  return n;
}

/* In the child: 0 as expected, 1 otherwise (said on stderr), 2 set-up. */
static int one_case(long nproc, int want_threads, int want_sockets) {
  if (setgid(kUid) != 0 || setuid(kUid) != 0) return 2;
  prctl(PR_SET_DUMPABLE, 1); /* /proc/self readable by its own uid again */
  if (nproc > 0) {
    struct rlimit rl = {(rlim_t)nproc, (rlim_t)nproc};
    if (setrlimit(RLIMIT_NPROC, &rl) != 0) return 2;
  }
  const int before = count("/proc/self/fd", 1);
  char* volatile p = malloc(4u << 20); /* large: lowtide's threads start */
  if (p == NULL) return 2;
  p[0] = 1;
  const struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  const int threads = count("/proc/self/task", 0), sockets = count("/proc/self/fd", 1) - before;
  free(p);
  if (threads == want_threads && sockets == want_sockets) return 0;
  fprintf(stderr, "FAIL: RLIMIT_NPROC %ld: %d threads and %d new sockets, want %d and %d\n", nproc, threads,
          sockets, want_threads, want_sockets);
  return 1;
}

int main(void) {
  if (geteuid() != 0) {
    fprintf(stderr, "SKIP: needs root (setuid to a fresh uid, RLIMIT_NPROC)\n");
    return 77;
  }
  const struct {
    long nproc;
    int threads, sockets;
  } cases[] = {{1, 1, 0}, {2, 2, 0}, {0, 3, 1}};
  int failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    const pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) _exit(one_case(cases[i].nproc, cases[i].threads, cases[i].sockets));
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) == 2) {
      fprintf(stderr, "case RLIMIT_NPROC %ld: could not be set up (status %d)\n", cases[i].nproc, status);
      return 2;
    }
    failed += WEXITSTATUS(status) != 0;
  }
  if (failed != 0) return 1;
  printf("live_start_fail: no socket left after a failed start (decay thread, server), one with both\n");
  return 0;
}
