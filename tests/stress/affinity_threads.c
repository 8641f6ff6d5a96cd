/* lowtide's threads take the main thread's CPUs, not those of the thread
 * that happens to start them (pal::start_thread): a worker pinned to one
 * CPU (isolcpus, a latency-critical thread) that makes the first large
 * allocation must not bring the decay thread and the live server onto that
 * CPU for good. Before 2026-12-06 they inherited the worker's mask. Needs
 * two CPUs the process may use; with one there is nothing to tell apart
 * (exit 77, meson's skip). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lowtide_threads.h"

static cpu_set_t main_cpus;
static int pinned_cpu = -1;

static void* worker(void* arg) {
  (void)arg;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(pinned_cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) return (void*)1;
  void* volatile p = malloc(4u << 20); /* large: lowtide's threads start here */
  if (p == NULL) return (void*)1;
  memset((void*)p, 1, 4096);
  free((void*)p);
  return NULL;
}

static int not_main_cpus(int tid, const char* name, void* arg) {
  (void)arg;
  cpu_set_t got;
  if (sched_getaffinity(tid, sizeof got, &got) == 0 && CPU_EQUAL(&got, &main_cpus)) return 0;
  fprintf(stderr, "FAIL: %s may run on %d CPU(s), want the main thread's %d\n", name, CPU_COUNT(&got),
          CPU_COUNT(&main_cpus));
  return 1;
}

int main(void) {
  if (sched_getaffinity(0, sizeof main_cpus, &main_cpus) != 0) return 4;
  if (CPU_COUNT(&main_cpus) < 2) {
    fprintf(stderr, "SKIP: %d CPU(s) allowed: nothing to tell apart\n", CPU_COUNT(&main_cpus));
    return 77;
  }
  for (int c = 0; c < CPU_SETSIZE && pinned_cpu < 0; ++c)
    if (CPU_ISSET(c, &main_cpus)) pinned_cpu = c;
  pthread_t t;
  void* r = NULL;
  if (pthread_create(&t, NULL, worker, NULL) != 0 || pthread_join(t, &r) != 0 || r != NULL) return 5;
  if (check_lowtide_threads(not_main_cpus, NULL) != 0) return 1;
  printf("ok: lowtide's threads run on the main thread's %d CPUs, not the pinned worker's one\n",
         CPU_COUNT(&main_cpus));
  return 0;
}
