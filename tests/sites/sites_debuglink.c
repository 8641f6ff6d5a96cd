/* A report's debug-file search (docs/report.md, reliability.md no. 110).
 * One large block from a static function (SITE_NAME, split_site unless
 * the build says otherwise), a JSON report through lowtide_write_report
 * (argv[1]), then /proc/self/maps read: the report must not have loaded
 * debuginfod's client, libcurl or OpenSSL into the process. libdw's
 * standard search (dwfl_standard_find_debuginfo) did, at the first frame
 * whose object has no debug file (Debian's libc here: no libc6-dbg), by
 * dlopening libdebuginfod.so.1, whatever DEBUGINFOD_URLS said. Exit 77
 * (skip) where libdw is not in the process (no names to look up). The
 * report's names are checked by the caller: the meson test of this
 * program as built (.symtab and DWARF in the file), debuglink_test.py
 * for copies whose debug info is split off behind a .gnu_debuglink. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowtide/lowtide.h"

#ifndef SITE_NAME
#define SITE_NAME split_site
#endif

static void* volatile keep;
static void* (*volatile alloc)(size_t) = malloc;

__attribute__((noinline)) static void SITE_NAME(void) { keep = alloc((size_t)4 << 20); }

/* The first line of /proc/self/maps naming any of names, or NULL. */
static const char* mapped(const char* const* names, size_t n) {
  static char line[4096];
  FILE* f = fopen("/proc/self/maps", "re");
  if (f == NULL) {
    fprintf(stderr, "FAIL: /proc/self/maps\n");
    exit(1);
  }
  const char* hit = NULL;
  while (hit == NULL && fgets(line, sizeof line, f) != NULL)
    for (size_t i = 0; i < n && hit == NULL; ++i)
      if (strstr(line, names[i]) != NULL) hit = line;
  fclose(f);
  return hit;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: sites_debuglink REPORT\n");
    return 2;
  }
  int (*write_report)(const char*, int);
  *(void**)&write_report = dlsym(RTLD_DEFAULT, "lowtide_write_report"); /* (ISO C has no cast for it) */
  if (write_report == NULL) {
    fprintf(stderr, "FAIL: lowtide is not preloaded\n");
    return 1;
  }
  SITE_NAME();
  static const char* const libdw[] = {"/libdw.so", "/libdw-"};
  if (mapped(libdw, 2) == NULL) {
    printf("SKIP: no libdw in the process\n");
    return 77;
  }
  static const char* const helpers[] = {"libdebuginfod", "libcurl", "libssl", "libcrypto"};
  const char* before = mapped(helpers, 4);
  if (before != NULL) {
    printf("SKIP: mapped before the report: %s", before);
    return 77;
  }
  if (write_report(argv[1], LOWTIDE_REPORT_JSON) != 0) {
    fprintf(stderr, "FAIL: the report\n");
    return 1;
  }
  const char* after = mapped(helpers, 4);
  if (after != NULL) {
    fprintf(stderr, "FAIL: the report loaded %s", after);
    return 1;
  }
  printf("ok: nothing of debuginfod's in the process after the report\n");
  return 0;
}
