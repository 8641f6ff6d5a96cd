#include "small_path.hpp"

namespace lowtide::small {

std::size_t class_exact_max = 0;
std::uint16_t class_table[kTableMax / kMinAlign + 1];

bool class_sizes_match(std::size_t limit) {
  for (std::size_t r = kMinAlign; r <= limit; r += (r < 1024 ? kMinAlign : round_up(r / 8, kMinAlign))) {
    void* p = mi_malloc(r);
    if (p == nullptr) return false;
    bool same = mi_usable_size(p) == mi_good_size(r);
    mi_free(p);
    if (!same) return false;
  }
  void* p = mi_malloc(limit);
  bool same = p != nullptr && mi_usable_size(p) == mi_good_size(limit);
  mi_free(p);
  return same;
}

// mimalloc 2.0.9's option defaults on Linux (src/options.c, in enum order):
// mi_option_set marks an option initialized, and mimalloc reads an option's
// MIMALLOC_* variable only while it is not, so setting every option to its
// default makes the environment invisible to it. There is no API for the
// defaults, hence the table; the assert catches a mimalloc with other options.
constexpr long kMiDefaults[] = {
    0,    // show_errors
    0,    // show_stats
    0,    // verbose
    1,    // eager_commit
    0,    // deprecated_eager_region_commit
    0,    // deprecated_reset_decommits
    0,    // large_os_pages
    0,    // reserve_huge_os_pages
    -1,   // reserve_huge_os_pages_at
    0,    // reserve_os_memory
    0,    // deprecated_segment_cache
    0,    // page_reset
    0,    // abandoned_page_decommit
    0,    // deprecated_segment_reset
    1,    // eager_commit_delay
    25,   // decommit_delay
    0,    // use_numa_nodes
    0,    // limit_os_alloc
    100,  // os_tag
    16,   // max_errors
    16,   // max_warnings
    8,    // max_segment_reclaim
    1,    // allow_decommit
    500,  // segment_decommit_delay
    1,    // decommit_extend_delay
    0,    // destroy_on_exit
};
static_assert(sizeof kMiDefaults / sizeof kMiDefaults[0] == _mi_option_last,
              "kMiDefaults must list every option of this mimalloc version");

void ignore_environment() {
  for (int i = 0; i < _mi_option_last; ++i) mi_option_set(static_cast<mi_option_t>(i), kMiDefaults[i]);
}

void configure() {
  class_exact_max = class_sizes_match(kClassExactMax) ? kClassExactMax : 0;
  if (class_exact_max == 0) return;
  static_assert(kTableMax <= kClassExactMax && kTableMax <= UINT16_MAX);
  for (std::size_t r = kMinAlign; r <= kTableMax; r += kMinAlign)
    class_table[r / kMinAlign] = static_cast<std::uint16_t>(mi_good_size(r));
}

}  // namespace lowtide::small
