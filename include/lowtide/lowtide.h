/* lowtide: the C API the preloaded shim exports. Reach it from any process
 * running under LD_PRELOAD=liblowtide.so, without linking: from C with
 * dlsym(RTLD_DEFAULT, "lowtide_get_stats"), from Python with
 * ctypes.CDLL(None).lowtide_get_stats. */
#ifndef LOWTIDE_LOWTIDE_H
#define LOWTIDE_LOWTIDE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, e.g. "0.1.0". */
const char* lowtide_version(void);

/* Process totals: the fields after `size`, with their meanings, are the rows
 * of lowtide_stats.def (next to this header). Set `size` to
 * sizeof(struct lowtide_stats) before the call: fields may be added at the
 * end in later versions, and only the first `size` bytes are written. Byte
 * counts of "out"/"freed" are usable sizes. */
struct lowtide_stats {
  size_t size;
#define LOWTIDE_STAT(name, kind, unit, object, key, pos, label, meaning) uint64_t name;
#include "lowtide_stats.def"
#undef LOWTIDE_STAT
};

/* 0 on success; -1 with errno EINVAL if stats is NULL or size is too small. */
int lowtide_get_stats(struct lowtide_stats* stats);

/* The names of the fields after `size`, in order, comma-separated
 * ("malloc_calls,calloc_calls,..."); each is a uint64_t. For bindings that
 * build the struct at run time (python/lowtide.py). */
const char* lowtide_stats_fields(void);

enum {
  LOWTIDE_REPORT_CONFIGURED = 0,
  LOWTIDE_REPORT_TEXT = 1,
  LOWTIDE_REPORT_JSON = 2,
  LOWTIDE_REPORT_BOTH = 3,
  LOWTIDE_REPORT_PROMETHEUS = 4
};

/* Write a report now to path ("%p" = pid, "%%" = "%"; NULL = the configured
 * LOWTIDE_STATS_FILE, stderr by default). 0 on success, -1 with errno. */
int lowtide_write_report(const char* path_or_null, int format);

/* Give back to the OS what can be given back now (mimalloc's freed pages of
 * the calling thread, and everything lowtide holds); returns the bytes by
 * which the resident set fell. */
size_t lowtide_release(void);

#ifdef __cplusplus
}
#endif

#endif
