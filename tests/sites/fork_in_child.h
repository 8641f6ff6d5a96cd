// For the sites tests that fork inside (or at the edges of) a capture: in
// the child of such a fork, a fork of its own must not wait (nanosleep,
// which each test interposes and counts in `sleeps`, the calling thread's
// count) for a capture still counted in flight from the parent, and its
// child must exit cleanly. 0: ok; 1: failed (said on stderr, naming `name`).
#pragma once
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int fork_in_child_ok(const char* name, const long* sleeps) {
  const long before = *sleeps;
  pid_t p = fork();
  if (p == 0) _exit(0);
  const long waited = *sleeps - before;
  int st = 0;
  if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "FAIL: %s: the child's fork failed\n", name);
    return 1;
  }
  if (waited != 0) {
    fprintf(stderr, "FAIL: %s: a fork in the child made %ld waits (a capture still counted in flight)\n", name,
            waited);
    return 1;
  }
  return 0;
}
