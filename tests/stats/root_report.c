/* Reports written by a root process in states only root can put it in
 * (root_report_test.py):
 *
 *   root_report groups N PATH  with N supplementary groups (setgroups): the
 *       Groups line of /proc/self/status grows past 4 KiB, ahead of VmHWM
 *       and VmRSS; writes the JSON report to PATH
 *   root_report fsuid DIR      with the file-system uid 65534 (setfsuid):
 *       the report's temporary file in DIR is owned by 65534, not by the
 *       euid (0); writes the report to DIR/r.txt three times
 *
 * Exits 0 when the calls were made (the test reads the results). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
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
  if (strcmp(argv[1], "fsuid") == 0) {
    char path[4096];
    snprintf(path, sizeof path, "%s/r.txt", argv[2]);
    setfsuid(65534);
    for (int i = 0; i < 3; i++) write_report(path, 1); /* fails: the file is not ours */
    return 0;
  }
  return 2;
}
