/* Run by setuid_test.py as a setuid-root copy started by nobody: prints
 * what it sees, one "key value" per line, for the script to judge. Linked
 * against liblowtide, so every malloc here is lowtide's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <lowtide/lowtide.h>

static struct lowtide_stats stats(void) {
  struct lowtide_stats s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  if (lowtide_get_stats(&s) != 0) {
    fprintf(stdout, "error lowtide_get_stats\n");
    exit(2);
  }
  return s;
}

/* Whether SIGTERM and SIGINT have a handler, as the kernel sees it (the
 * SigCgt mask of /proc/self/status): lowtide installs one for its report
 * only when the report is on, never in an AT_SECURE process. */
static int term_int_caught(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long mask = 0;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, "SigCgt:", 7) == 0) mask = strtoull(line + 7, NULL, 16);
  if (f != NULL) fclose(f);
  return (int)((mask >> (SIGTERM - 1)) & 1) + (int)((mask >> (SIGINT - 1)) & 1);
}

int main(void) {
  printf("at_secure %lu\n", getauxval(AT_SECURE));
  printf("term_int_caught %d\n", term_int_caught());
  printf("uid %d euid %d\n", (int)getuid(), (int)geteuid());
  /* An 8 KiB block: small at the default cutoff (128 KiB); large if
   * LOWTIDE_CUTOFF=4096 were obeyed. volatile: the call must happen. */
  struct lowtide_stats before = stats();
  char* volatile p = malloc(8192);
  memset(p, 1, 8192);
  struct lowtide_stats after = stats();
  printf("large_maps_for_8k %llu\n", (unsigned long long)(after.large_maps - before.large_maps));
  free(p);
  for (int i = 0; i < 1000; ++i) {
    char* volatile q = malloc((size_t)(i % 64 + 1) * 64);
    free(q);
  }
  fflush(stdout);
  return 0;
}
