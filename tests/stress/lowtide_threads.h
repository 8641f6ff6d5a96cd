/* lowtide's own threads in this process (named "lowtide-..."), for the C
 * tests that check how they were started (rt_threads.c, affinity_threads.c). */
#pragma once
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Calls check(tid, name, arg) for each lowtide thread; returns how many
 * there are, and sets *bad when a check returned nonzero. */
static int each_lowtide_thread(int (*check)(int tid, const char* name, void* arg), void* arg, int* bad) {
  int seen = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == NULL) return -1;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    char path[300], name[32] = "";
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(name, sizeof name, f) == NULL) name[0] = '\0';
    fclose(f);
    name[strcspn(name, "\n")] = '\0';
    if (strncmp(name, "lowtide-", 8) != 0) continue;
    ++seen;
    if (check(atoi(e->d_name), name, arg) != 0) *bad = 1;
  }
  closedir(d);
  return seen;
}

/* Waits (up to 5 s) until the decay thread and the live server both exist,
 * then checks each; 0 when both are there and pass, else 1 (said on stderr). */
static int check_lowtide_threads(int (*check)(int tid, const char* name, void* arg), void* arg) {
  int seen = 0, bad = 0;
  for (int tries = 0; tries < 500; ++tries) {
    bad = 0;
    seen = each_lowtide_thread(check, arg, &bad);
    if (seen >= 2) break;
    usleep(10000);
  }
  if (seen < 2) {
    fprintf(stderr, "FAIL: %d lowtide thread(s) after a large allocation, want the decay thread and the live server\n",
            seen);
    return 1;
  }
  return bad;
}
