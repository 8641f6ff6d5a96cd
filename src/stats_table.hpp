// The fields of struct lowtide_stats as data, from the one table of them,
// include/lowtide/lowtide_stats.def: what lowtide_get_stats fills, what
// lowtide_stats_fields() names, and the JSON report's generic objects
// (totals.calls, totals.small, totals.large, the rows' copies of them, and
// the top-level "large" and "small" objects).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lowtide/lowtide.h"
#include "stats.hpp"

namespace lowtide::stats {

enum class Kind : unsigned char { counter, gauge };
enum class Unit : unsigned char { count, bytes, byte_seconds };
// The JSON report object that shows a field (lowtide_stats.def, `object`).
enum class Object : unsigned char { none, totals_calls, totals_small, totals_large, large, small };

struct Field {
  const char* name;
  Kind kind;
  Unit unit;
  Object object;
  const char* key;     // its JSON key in `object`
  unsigned pos;        // its place there
  const char* label;   // its name in the text report ("" = none)
  const char* meaning;  // the table's one line (the Prometheus report's HELP)
  unsigned counter;    // its Counter; kCounters for a gauge
  std::size_t offset;  // in struct lowtide_stats
};

#define LT_KIND_COUNTER Kind::counter
#define LT_KIND_GAUGE Kind::gauge
#define LT_UNIT_COUNT Unit::count
#define LT_UNIT_BYTES Unit::bytes
#define LT_UNIT_BYTE_S Unit::byte_seconds
#define LT_INDEX_COUNTER(name) Counter::name
#define LT_INDEX_GAUGE(name) kCounters
inline constexpr Field kFields[] = {
#define LOWTIDE_STAT(name, kind, unit, object, key, pos, label, meaning) \
  {#name, LT_KIND_##kind, LT_UNIT_##unit, Object::object, key, pos, label, meaning, LT_INDEX_##kind(name), \
   offsetof(::lowtide_stats, name)},
#include "lowtide/lowtide_stats.def"
#undef LOWTIDE_STAT
};
#undef LT_KIND_COUNTER
#undef LT_KIND_GAUGE
#undef LT_UNIT_COUNT
#undef LT_UNIT_BYTES
#undef LT_UNIT_BYTE_S
#undef LT_INDEX_COUNTER
#undef LT_INDEX_GAUGE
inline constexpr unsigned kFieldCount = sizeof kFields / sizeof kFields[0];

// Field indexes sorted by (object, pos): each JSON object's keys in order.
inline constexpr std::array<unsigned, kFieldCount> kJsonOrder = [] {
  std::array<unsigned, kFieldCount> a{};
  for (unsigned i = 0; i < kFieldCount; ++i) a[i] = i;
  auto before = [](unsigned x, unsigned y) {
    const Field &f = kFields[x], &g = kFields[y];
    return f.object != g.object ? f.object < g.object : f.pos < g.pos;
  };
  for (unsigned i = 1; i < kFieldCount; ++i)
    for (unsigned j = i; j > 0 && before(a[j], a[j - 1]); --j) std::swap(a[j], a[j - 1]);
  return a;
}();

// The table's invariants, checked once here: every field a uint64_t right
// after the one before (the struct is an ABI: append only); counters in
// table order; each JSON object's positions 0, 1, ... without a gap; the
// thread rows' objects hold counters only (a row has no gauges).
inline constexpr bool kTableOk = [] {
  unsigned next_counter = 0;
  for (unsigned i = 0; i < kFieldCount; ++i) {
    const Field& f = kFields[i];
    if (f.offset != sizeof(std::size_t) + i * sizeof(std::uint64_t)) return false;
    if (f.kind == Kind::counter && f.counter != next_counter++) return false;
    if (f.kind == Kind::gauge && f.object != Object::large && f.object != Object::small && f.object != Object::none)
      return false;
    if (i > 0) {
      const Field& p = kFields[kJsonOrder[i - 1]];
      const Field& q = kFields[kJsonOrder[i]];
      if (q.object != Object::none && (p.object == q.object ? q.pos != p.pos + 1 : q.pos != 0)) return false;
    } else if (kFields[kJsonOrder[0]].object != Object::none && kFields[kJsonOrder[0]].pos != 0) {
      return false;
    }
  }
  return next_counter == kCounters;
}();
static_assert(kTableOk, "include/lowtide/lowtide_stats.def: see the invariants above kTableOk");

// The text report's totals section prints the small and the large path under
// one heading row: both objects need the same labels, in the same order, and
// every totals column a label.
inline constexpr bool kLabelsOk = [] {
  std::string_view small[kFieldCount], large[kFieldCount];
  unsigned ns = 0, nl = 0;
  for (unsigned i : kJsonOrder) {
    const Field& f = kFields[i];
    bool totals = f.object == Object::totals_calls || f.object == Object::totals_small ||
                  f.object == Object::totals_large;
    if (totals && f.label[0] == '\0') return false;
    if (f.object == Object::totals_small) small[ns++] = f.label;
    if (f.object == Object::totals_large) large[nl++] = f.label;
  }
  if (ns != nl) return false;
  for (unsigned i = 0; i < ns; ++i)
    if (small[i] != large[i]) return false;
  return true;
}();
static_assert(kLabelsOk, "include/lowtide/lowtide_stats.def: totals_small and totals_large need the same labels");
static_assert(sizeof(::lowtide_stats) == sizeof(std::size_t) + kFieldCount * sizeof(std::uint64_t));

// Not constexpr: reaching it in field_index is a compile error naming it.
void no_such_field_in_lowtide_stats_def();

// The index of the field called `name` (at compile time: a wrong name does
// not compile).
consteval unsigned field_index(std::string_view name) {
  for (unsigned i = 0; i < kFieldCount; ++i)
    if (name == kFields[i].name) return i;
  no_such_field_in_lowtide_stats_def();
  return kFieldCount;
}

// f(field, index) for each field of JSON object `obj`, in its order.
template <typename F>
inline void each_in(Object obj, F f) {
  for (unsigned i : kJsonOrder)
    if (kFields[i].object == obj) f(kFields[i], i);
}

// Every field's value, in table order (kFieldCount of them): counters from
// snap.total, gauges read now.
void read_fields(const Snapshot& snap, std::uint64_t* out);

// "malloc_calls,calloc_calls,...": lowtide_stats_fields().
const char* field_names();

}  // namespace lowtide::stats
