/* A report's own helpers are not the program's (docs/reliability.md no.
 * 104): writing a report with call sites on names their frames through
 * libdw, which allocates (with compressed debug sections, such as this
 * program's (-gz) or Debian's -dbg packages, large buffers to inflate
 * them; and, before no. 110, where a debug file was missing,
 * debuginfod's client, which starts libcurl), and demangles through the C++ runtime, which allocates
 * too. Those calls were counted as the program's, on the reporting
 * thread: a report, lowtide_get_stats and the next report showed tens of
 * thousands of calls the program never made, call sites in libdw, libelf
 * or libcrypto, and a large peak the program never reached. Here (every
 * large block captured; a cutoff of 4 KiB, so that libdw's buffers are
 * large blocks): across three reports in a row the calls, the bytes asked
 * for and freed, the blocks released, the large peak and the other
 * counters of lowtide_get_stats stay as they were; the bytes and blocks
 * the helpers keep for good stay counted as handed out (the totals' live
 * bytes are what the process holds: large_out - large_freed is large_live
 * throughout), and the last report has no site in libdw, libelf, libcurl
 * or libcrypto. Exit 77 (skip) where libdw did not name the frame from
 * this file's DWARF: then no report allocated anything to count. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lowtide/lowtide.h"

static void* volatile keep[4];
static void* (*volatile alloc)(size_t) = malloc;

__attribute__((noinline)) static void own_site(void) {
  for (int i = 0; i < 4; ++i) keep[i] = alloc((size_t)(64 + 16 * i) << 10);
}

static int (*get_stats)(struct lowtide_stats*);
static int (*write_report)(const char*, int);

static struct lowtide_stats read_stats(void) {
  struct lowtide_stats s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  if (get_stats(&s) != 0) {
    fprintf(stderr, "FAIL: lowtide_get_stats\n");
    exit(1);
  }
  return s;
}

/* The whole file at path, NUL-terminated (static buffer). */
static const char* slurp(const char* path) {
  static char buf[1 << 20];
  int fd = open(path, O_RDONLY);
  if (fd < 0) return "";
  size_t n = 0;
  ssize_t r;
  while (n < sizeof buf - 1 && (r = read(fd, buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
  close(fd);
  buf[n] = '\0';
  return buf;
}

/* Every field but those that may move: the reuse cache's levels (blocks
 * the helpers freed may be held there, real memory), the registry's rows,
 * the bytes and blocks handed out (the helpers' blocks kept for good: see
 * consistent()), the live bytes, and the bytes given back to the OS (they
 * were). */
static int compare(const char* when, const struct lowtide_stats* a, const struct lowtide_stats* b) {
  static const char* skip[] = {"threads", "large_cached_bytes", "large_cached_peak", "large_cached_byte_seconds",
                               "small_thread_cached", "small_out", "large_out", "large_maps", "large_live",
                               "large_returned_bytes", "large_released_free", "large_released_decay",
                               "large_released_demand", "large_released_limit", "large_released_room"};
  const char* (*fields)(void);
  *(void**)&fields = dlsym(RTLD_DEFAULT, "lowtide_stats_fields"); /* (ISO C has no cast for it) */
  const char* names = fields();
  const uint64_t* va = (const uint64_t*)((const char*)a + sizeof(size_t));
  const uint64_t* vb = (const uint64_t*)((const char*)b + sizeof(size_t));
  int bad = 0;
  for (size_t i = 0; i < (sizeof *a - sizeof(size_t)) / sizeof(uint64_t); ++i) {
    char name[64];
    size_t len = strcspn(names, ",");
    snprintf(name, sizeof name, "%.*s", (int)len, names);
    names += len + (names[len] == ',');
    int skipped = 0;
    for (size_t k = 0; k < sizeof skip / sizeof *skip; ++k) skipped |= strcmp(name, skip[k]) == 0;
    if (!skipped && va[i] != vb[i]) {
      fprintf(stderr, "FAIL: %s: %s went from %llu to %llu\n", when, name, (unsigned long long)va[i],
              (unsigned long long)vb[i]);
      bad = 1;
    }
  }
  return bad;
}

/* The counters' live large bytes are the process's (large_live). */
static int consistent(const char* when, const struct lowtide_stats* s) {
  if (s->large_out - s->large_freed == s->large_live) return 0;
  fprintf(stderr, "FAIL: %s: large_out - large_freed = %llu, large_live %llu\n", when,
          (unsigned long long)(s->large_out - s->large_freed), (unsigned long long)s->large_live);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: sites_report_own REPORT_PREFIX\n");
    return 2;
  }
  *(void**)&get_stats = dlsym(RTLD_DEFAULT, "lowtide_get_stats"); /* (ISO C has no cast for it) */
  *(void**)&write_report = dlsym(RTLD_DEFAULT, "lowtide_write_report");
  if (get_stats == NULL || write_report == NULL || dlsym(RTLD_DEFAULT, "lowtide_stats_fields") == NULL) {
    fprintf(stderr, "FAIL: lowtide is not preloaded\n");
    return 1;
  }
  own_site();
  free(keep[1]);  /* the peak is above what is live */
  char first[4096], last[4096];
  snprintf(first, sizeof first, "%s.first.json", argv[1]);
  snprintf(last, sizeof last, "%s.last.json", argv[1]);
  const struct lowtide_stats s0 = read_stats();
  if (write_report(first, LOWTIDE_REPORT_JSON) != 0) {
    fprintf(stderr, "FAIL: the first report\n");
    return 1;
  }
  const struct lowtide_stats s1 = read_stats();
  if (write_report("/dev/null", LOWTIDE_REPORT_BOTH) != 0) {
    fprintf(stderr, "FAIL: the second report\n");
    return 1;
  }
  const struct lowtide_stats s2 = read_stats();
  if (write_report(last, LOWTIDE_REPORT_JSON) != 0) {
    fprintf(stderr, "FAIL: the last report\n");
    return 1;
  }
  const struct lowtide_stats s3 = read_stats();
  const char* report = slurp(first);
  if (strstr(report, "\"function\": \"own_site\"") == NULL || strstr(report, "sites_report_own.c") == NULL) {
    printf("SKIP: libdw did not name own_site from its DWARF\n");
    return 77;
  }
  int bad = compare("the first report", &s0, &s1);
  bad |= compare("the second report", &s1, &s2);
  bad |= compare("the last report", &s2, &s3);
  bad |= consistent("before", &s0) | consistent("after the first report", &s1) |
         consistent("after the second report", &s2) | consistent("after the last report", &s3);
  report = slurp(last);
  static const char* helpers[] = {"libdw.so", "libelf.so", "libcurl", "libcrypto.so", "libdebuginfod"};
  for (size_t i = 0; i < sizeof helpers / sizeof *helpers; ++i)
    if (strstr(report, helpers[i]) != NULL) {
      fprintf(stderr, "FAIL: the last report has a site in %s\n", helpers[i]);
      bad = 1;
    }
  if (!bad) printf("ok: three reports, the counters and the peak as they were (peak %llu)\n",
                   (unsigned long long)s3.large_peak_live);
  return bad;
}
