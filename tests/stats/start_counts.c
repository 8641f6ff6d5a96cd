/* What lowtide counts before main in a C program that allocates nothing
 * before it: lowtide's own start (its constructor's forwarding probe, the
 * owner marker its report start sets with setenv, the loader's work for
 * its lookups) is not the program's: no call is counted, and no byte is
 * live yet. Until 2026-12-06 the probe's malloc was counted as the
 * program's and never freed in the counters: 32 bytes live in every
 * process, reported as live at exit. Until 2026-12-07 the setenv of
 * LOWTIDE_OWNER_PID (its string, tsearch node and environ array) and the
 * dlopen/dlsym of libstdc++ for the C++ runtime's functions (dlerror's
 * message, the library's path) were counted as the program's calls: 5
 * mallocs, 1 realloc and 3 frees, whose sizes follow the pid's and the
 * children counter's inode's digits (docs/reliability.md no. 125). Runs
 * only under lowtide (the API is looked up weakly, without a call that
 * could allocate).
 *
 *   start_counts          (LOWTIDE_STATS=off) no call and no live byte
 *   start_counts report   (a report configured) no call and no byte asked
 *                         for; live bytes allowed: the marker's string and
 *                         environ array are memory the process holds
 *   start_counts sites    (LOWTIDE_SITES on: start_sites_test.py) nothing
 *                         checked here: what the loader keeps of libunwind
 *                         and libdw is live; that script compares the
 *                         reports with sites off and on */
#include <stdio.h>
#include <string.h>

#include "lowtide/lowtide.h"

extern int lowtide_get_stats(struct lowtide_stats* s) __attribute__((weak));

int main(int argc, char** argv) {
  if (lowtide_get_stats == NULL) {
    fprintf(stderr, "start_counts: lowtide_get_stats not found: is liblowtide.so preloaded?\n");
    return 2;
  }
  struct lowtide_stats s;
  s.size = sizeof s;
  if (lowtide_get_stats(&s) != 0) return 2;
  const int strict = argc == 1;
  const int report = argc > 1 && strcmp(argv[1], "report") == 0;
  if (!strict && !report) return 0;
  const unsigned long long calls =
      (unsigned long long)(s.malloc_calls + s.calloc_calls + s.realloc_calls + s.aligned_calls + s.free_calls);
  const unsigned long long requested = (unsigned long long)(s.small_requested + s.large_requested);
  if (calls != 0 || requested != 0) {
    fprintf(stderr,
            "start_counts: calls counted before main's first allocation: malloc %llu, calloc %llu, "
            "realloc %llu, aligned %llu, free %llu; %llu bytes requested\n",
            (unsigned long long)s.malloc_calls, (unsigned long long)s.calloc_calls,
            (unsigned long long)s.realloc_calls, (unsigned long long)s.aligned_calls,
            (unsigned long long)s.free_calls, requested);
    return 1;
  }
  const long long small = (long long)(s.small_out - s.small_freed);
  const long long large = (long long)(s.large_out - s.large_freed);
  if (strict && (small != 0 || large != 0)) {
    fprintf(stderr, "start_counts: %lld small and %lld large bytes live before main's first allocation\n", small,
            large);
    return 1;
  }
  return 0;
}
