/* What lowtide counts before main in a C program that allocates nothing
 * before it: lowtide's own start (its constructor's forwarding probe, the
 * loader's work for its lookups) is freed again, so no byte is live yet.
 * Until 2026-12-06 the probe's malloc was counted as the program's and
 * never freed in the counters: 32 bytes live in every process, reported
 * as live at exit. Runs only under lowtide (the API is looked up weakly,
 * without a call that could allocate). With an argument (LOWTIDE_SITES
 * on: start_sites_test.py) live bytes are allowed: what the loader keeps
 * of libunwind and libdw is memory the process holds, counted as live;
 * that script checks that nothing else of it is counted. */
#include <stdio.h>

#include "lowtide/lowtide.h"

extern int lowtide_get_stats(struct lowtide_stats* s) __attribute__((weak));

int main(int argc, char** argv) {
  (void)argv;
  if (lowtide_get_stats == NULL) {
    fprintf(stderr, "start_counts: lowtide_get_stats not found: is liblowtide.so preloaded?\n");
    return 2;
  }
  struct lowtide_stats s;
  s.size = sizeof s;
  if (lowtide_get_stats(&s) != 0) return 2;
  const long long small = (long long)(s.small_out - s.small_freed);
  const long long large = (long long)(s.large_out - s.large_freed);
  if (argc == 1 && (small != 0 || large != 0)) {
    fprintf(stderr,
            "start_counts: %lld small and %lld large bytes live before main's first allocation "
            "(malloc calls %llu, frees %llu)\n",
            small, large, (unsigned long long)s.malloc_calls, (unsigned long long)s.free_calls);
    return 1;
  }
  return 0;
}
