/* LOWTIDE_* settings hold in a program whose first allocation comes from
 * its .preinit_array, which runs before libc's initialiser has set environ
 * (environ is NULL there): lowtide read its settings from environ and took
 * every default. Run with LOWTIDE_CUTOFF=4KiB: a block of 8 KiB must then
 * be a large one. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowtide/lowtide.h"

extern char** environ;
static void* early_block;
extern int lowtide_get_stats(struct lowtide_stats* s) __attribute__((weak));

static int environ_was_null;

static void early(int argc, char** argv, char** envp) {
  (void)argc;
  (void)argv;
  (void)envp;
  environ_was_null = environ == NULL;
  early_block = malloc(100); /* lowtide starts here */
}
__attribute__((section(".preinit_array"), used)) static void (*const preinit)(int, char**, char**) = early;

int main(void) {
  // A weak reference: NULL where lowtide is not loaded (no object-to-
  // function pointer cast, which ISO C does not allow).
  int (*get)(struct lowtide_stats*) = lowtide_get_stats;
  if (get == NULL) {
    fprintf(stderr, "FAIL: not running under lowtide\n");
    return 1;
  }
  if (!environ_was_null) {
    fprintf(stderr, "FAIL: environ was already set in .preinit_array: this test shows nothing here\n");
    return 1;
  }
  if (getenv("LOWTIDE_CUTOFF") == NULL || strcmp(getenv("LOWTIDE_CUTOFF"), "4KiB") != 0) {
    fprintf(stderr, "FAIL: run with LOWTIDE_CUTOFF=4KiB\n");
    return 1;
  }
  struct lowtide_stats before, after;
  before.size = sizeof before;
  after.size = sizeof after;
  if (get(&before) != 0) return 1;
  void* p = malloc(8192);
  if (p == NULL) return 1;
  memset(p, 1, 8192);
  if (get(&after) != 0) return 1;
  free(p);
  free(early_block);
  if (after.large_requested - before.large_requested < 8192) {
    fprintf(stderr, "FAIL: malloc(8192) took the small path: LOWTIDE_CUTOFF=4KiB was ignored\n");
    return 1;
  }
  printf("PASS preinit_env\n");
  return 0;
}
