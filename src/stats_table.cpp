#include "stats_table.hpp"

#include "large_cache.hpp"

namespace lowtide::stats {

namespace gauge {
// One function per GAUGE row of lowtide_stats.def, named after it: a new
// gauge row without its function does not compile.
std::uint64_t large_live(const Snapshot& s) { return s.large_live; }
std::uint64_t large_peak_live(const Snapshot& s) { return s.large_peak; }
std::uint64_t threads(const Snapshot& s) { return s.threads_seen; }
std::uint64_t large_cached_bytes(const Snapshot&) { return cache::cached_bytes(); }
std::uint64_t large_cached_peak(const Snapshot&) { return cache::cached_peak(); }
std::uint64_t large_cached_byte_seconds(const Snapshot&) { return cache::cached_byte_seconds(); }
std::uint64_t small_thread_cached(const Snapshot& s) { return s.small_cached; }
}  // namespace gauge

void read_fields(const Snapshot& snap, std::uint64_t* out) {
#define LT_VALUE_COUNTER(name) snap.total.c[Counter::name]
#define LT_VALUE_GAUGE(name) gauge::name(snap)
#define LOWTIDE_STAT(name, kind, unit, object, key, pos, label, meaning) *out++ = LT_VALUE_##kind(name);
#include "lowtide/lowtide_stats.def"
#undef LOWTIDE_STAT
#undef LT_VALUE_COUNTER
#undef LT_VALUE_GAUGE
}

const char* field_names() {
  static constexpr char kNames[] =
#define LOWTIDE_STAT(name, kind, unit, object, key, pos, label, meaning) "," #name
#include "lowtide/lowtide_stats.def"
#undef LOWTIDE_STAT
      ;
  return kNames + 1;  // past the leading comma
}

}  // namespace lowtide::stats
