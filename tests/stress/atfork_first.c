/* Fork handlers a library registered before the process's first allocation
 * (atfork_first_lib.c) may allocate: every fork must finish, in the parent
 * and in the child. Until 2026-12-06 lowtide registered its own handlers at
 * its first-call init, after such a library's, and the first fork hung in
 * the library's prepare handler (a large malloc waiting on lowtide's cache
 * lock, taken by lowtide's prepare handler, which ran first). Written in C:
 * a C++ program's runtime allocates while it starts, before the library's
 * constructor, and the order would then be right anyway. Every wait is
 * bounded (alarm() in the parent, a deadline for each child). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void atfork_first_counts(int* first, int* p, int* q, int* c);

static void fail(const char* what) {
  fprintf(stderr, "atfork_first: %s\n", what);
  exit(1);
}

int main(void) {
  alarm(60); /* a hang in the parent's handlers ends here, as a failure */
  int first, p, q, c;
  atfork_first_counts(&first, &p, &q, &c);
  if (first != 1)
    fail(first < 0 ? "lowtide is not preloaded" :
                     "something allocated before the library's constructor: this test no longer tests the order");
  /* The large path in use before the forks (its cache and threads). */
  for (int i = 0; i < 4; ++i) free(malloc((size_t)3 << 20));
  enum { kForks = 3 };
  for (int i = 0; i < kForks; ++i) {
    pid_t pid = fork();
    if (pid < 0) fail("fork failed");
    if (pid == 0) {
      int f2, p2, q2, c2;
      atfork_first_counts(&f2, &p2, &q2, &c2);
      free(malloc((size_t)2 << 20));
      _exit(c2 == 1 ? 0 : 3); /* (its parent's count was 0: it never runs the child handler) */
    }
    const time_t end = time(NULL) + 30;
    int st = 0;
    for (;;) {
      pid_t r = waitpid(pid, &st, WNOHANG);
      if (r == pid) break;
      if (r < 0 && errno != EINTR) fail("waitpid failed");
      if (time(NULL) > end) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        fail("a child did not exit within 30 s (hung in a fork handler?)");
      }
      usleep(10000);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail("a child did not exit with status 0");
  }
  atfork_first_counts(&first, &p, &q, &c);
  if (p != kForks || q != kForks || c != 0) fail("the library's handlers did not run once per fork");
  printf("atfork_first: %d forks, the library's handlers ran\n", kForks);
  return 0;
}
