/* lowtide's own threads take the ordinary scheduling policy, not that of
 * the thread that happens to start them (pal::start_thread): a real-time
 * program's large allocation (here from a SCHED_FIFO main thread) must not
 * give the decay thread's collects and the live server real-time priority
 * over the program's other real-time threads. Before 2026-12-06 both
 * inherited SCHED_FIFO. Needs CAP_SYS_NICE (CI runs as root); without it
 * the test cannot run and says so (exit 77, meson's skip). */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowtide_threads.h"

static int not_other(int tid, const char* name, void* arg) {
  (void)arg;
  const int pol = sched_getscheduler(tid);
  if (pol == SCHED_OTHER) return 0;
  fprintf(stderr, "FAIL: %s runs with policy %d, want SCHED_OTHER (%d)\n", name, pol, SCHED_OTHER);
  return 1;
}

int main(void) {
  struct sched_param sp = {.sched_priority = 1};
  if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
    fprintf(stderr, "SKIP: sched_setscheduler(SCHED_FIFO): %s (needs CAP_SYS_NICE)\n", strerror(errno));
    return 77;
  }
  void* volatile p = malloc(4u << 20); /* large: lowtide's threads start */
  if (p == NULL) return 3;
  memset((void*)p, 1, 4096);
  free((void*)p);
  if (check_lowtide_threads(not_other, NULL) != 0) return 1;
  printf("ok: lowtide's threads run SCHED_OTHER under a SCHED_FIFO program\n");
  return 0;
}
