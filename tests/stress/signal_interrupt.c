// signal() after siginterrupt(SIGINT, 1), under a process that writes a
// report (lowtide's SIGINT handler stands in for SIG_DFL): glibc leaves
// SA_RESTART out, so a blocking read ends with EINTR when SIGINT comes.
// lowtide's signal() made the action itself with SA_RESTART always, and
// the read was restarted after each SIGINT: a program that stops its loop
// on EINTR at Ctrl-C waited for ever. Here a child sends SIGINT every
// 20 ms and, if the read has not ended after 500 of them, writes a byte so
// that it does: the test fails then (read returned the byte), never hangs.
#define _DEFAULT_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t got;

static void on_int(int sig) {
  (void)sig;
  got = 1;
}

int main(void) {
  alarm(60);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  if (siginterrupt(SIGINT, 1) != 0) return 2;
#pragma GCC diagnostic pop
  void (*prev)(int) = signal(SIGINT, on_int);
  if (prev != SIG_DFL) {
    fprintf(stderr, "FAIL: signal() returned %s for SIGINT's first handler, want SIG_DFL\n",
            prev == SIG_IGN ? "SIG_IGN" : prev == SIG_ERR ? "SIG_ERR" : "a handler");
    return 1;
  }
  int fds[2];
  if (pipe(fds) != 0) return 2;
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) return 2;
  if (child == 0) {
    for (int i = 0; i < 500; ++i) {
      if (kill(parent, SIGINT) != 0) _exit(0);
      usleep(20 * 1000);
    }
    const char c = 'x';
    if (write(fds[1], &c, 1) != 1) _exit(1);
    _exit(0);
  }
  char c;
  const ssize_t n = read(fds[0], &c, 1);
  const int err = errno;
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  if (n != -1 || err != EINTR) {
    fprintf(stderr, "FAIL: read returned %zd (%s) after SIGINTs, want -1 with EINTR (siginterrupt)\n", n,
            n < 0 ? strerror(err) : "data");
    return 1;
  }
  if (!got) {
    fprintf(stderr, "FAIL: the handler did not run\n");
    return 1;
  }
  printf("signal_interrupt: ok\n");
  return 0;
}
