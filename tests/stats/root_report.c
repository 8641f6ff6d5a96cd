/* Reports written by a root process in states only root can put it in
 * (root_report_test.py):
 *
 *   root_report groups N PATH  with N supplementary groups (setgroups): the
 *       Groups line of /proc/self/status grows past 4 KiB, ahead of VmHWM
 *       and VmRSS; writes the JSON report to PATH
 *
 * Exits 0 when the calls were made (the test reads the results). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
  alarm(60);
  if (argc < 3) return 2;
  int (*write_report)(const char*, int);
  *(void**)&write_report = dlsym(RTLD_DEFAULT, "lowtide_write_report"); /* (ISO C has no cast for it) */
  if (write_report == NULL) return 2;
  if (strcmp(argv[1], "groups") == 0 && argc == 4) {
    int n = atoi(argv[2]);
    static gid_t g[65536];
    if (n <= 0 || n > 65536) return 2;
    for (int i = 0; i < n; i++) g[i] = (gid_t)(1000000 + i);
    if (setgroups((size_t)n, g) != 0) {
      perror("setgroups");
      return 1;
    }
    return write_report(argv[3], 2) == 0 ? 0 : 1;
  }
  return 2;
}
