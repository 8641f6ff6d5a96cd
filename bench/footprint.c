/* Fixed footprint (issue 15): a C program that allocates one small block and
 * prints its own RSS, PSS and private dirty memory from
 * /proc/self/smaps_rollup, in KiB. Run it under each allocator, e.g.
 *   LD_PRELOAD=build/src/liblowtide.so build/bench/footprint
 * docs/benchmarks.md "Fixed footprint" has the figures. C on purpose: a C
 * host loads no C++ runtime or libm of its own, so whatever an allocator
 * drags in shows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char* p = malloc(100);
  if (p == NULL) return 1;
  memset(p, 1, 100);
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  if (f == NULL) return 1;
  char line[256];
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "Rss:", 4) == 0 || strncmp(line, "Pss:", 4) == 0 || strncmp(line, "Private_Dirty:", 14) == 0)
      fputs(line, stdout);
  }
  fclose(f);
  free(p);
  return 0;
}
