/* struct lowtide_stats as the header lays it out, printed for
 * stats_layout_test.py: "sizeof N", then "name offset" for each field after
 * `size` (from lowtide_stats.def, so every field is printed).
 *
 * It also holds the ABI check: struct lowtide_stats_0_1 below is the struct
 * as it was written out by hand in lowtide.h before the table existed
 * (lowtide 0.1.0). Every one of its fields must keep its offset and size
 * in the struct built from the table; new fields may only come after them.
 * This file does not compile otherwise. Never edit the copy. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lowtide/lowtide.h"

/* The report formats lowtide_write_report takes, by the names docs/report.md
 * gives them (LOWTIDE_REPORT_PROMETHEUS was documented, and accepted as 4,
 * before the header had it: docs/reliability.md no. 106). */
_Static_assert(LOWTIDE_REPORT_CONFIGURED == 0 && LOWTIDE_REPORT_TEXT == 1 && LOWTIDE_REPORT_JSON == 2 &&
                   LOWTIDE_REPORT_BOTH == 3 && LOWTIDE_REPORT_PROMETHEUS == 4,
               "the report formats of lowtide.h");

struct lowtide_stats_0_1 {
  size_t size;
  uint64_t malloc_calls, calloc_calls, realloc_calls, aligned_calls, free_calls;
  uint64_t small_requested, small_out, small_freed;
  uint64_t large_requested, large_out, large_freed;
  uint64_t large_maps, large_unmaps, large_in_place, large_remaps, large_remap_bytes;
  uint64_t large_copies, large_copy_bytes, large_returned_bytes;
  uint64_t cross_up, cross_down, large_fallback;
  uint64_t large_live, large_peak_live;
  uint64_t threads;
  uint64_t large_reused, large_cached_frees, large_cached_bytes;
};

#define SAME(f)                                                                                          \
  _Static_assert(offsetof(struct lowtide_stats, f) == offsetof(struct lowtide_stats_0_1, f) &&            \
                     sizeof(((struct lowtide_stats*)0)->f) == sizeof(((struct lowtide_stats_0_1*)0)->f), \
                 "struct lowtide_stats: " #f " moved or changed size (an ABI break)");
SAME(size)
SAME(malloc_calls) SAME(calloc_calls) SAME(realloc_calls) SAME(aligned_calls) SAME(free_calls)
SAME(small_requested) SAME(small_out) SAME(small_freed)
SAME(large_requested) SAME(large_out) SAME(large_freed)
SAME(large_maps) SAME(large_unmaps) SAME(large_in_place) SAME(large_remaps) SAME(large_remap_bytes)
SAME(large_copies) SAME(large_copy_bytes) SAME(large_returned_bytes)
SAME(cross_up) SAME(cross_down) SAME(large_fallback)
SAME(large_live) SAME(large_peak_live)
SAME(threads)
SAME(large_reused) SAME(large_cached_frees) SAME(large_cached_bytes)
_Static_assert(sizeof(struct lowtide_stats) >= sizeof(struct lowtide_stats_0_1),
               "struct lowtide_stats: fields removed (an ABI break)");

int main(void) {
  printf("sizeof %zu\n", sizeof(struct lowtide_stats));
#define LOWTIDE_STAT(name, kind, unit, object, key, pos, label, meaning) \
  printf("%s %zu %zu\n", #name, offsetof(struct lowtide_stats, name), sizeof(((struct lowtide_stats*)0)->name));
#include "lowtide/lowtide_stats.def"
#undef LOWTIDE_STAT
  return 0;
}
