// Runtime invariant checks of the large path, compiled in by
// `meson setup -Dinvariants=true` (off by default; scripts/test runs the unit,
// api and stress suites on such a build). The check functions exist in every
// build (tests/unit calls them on test objects); only the calls after each
// large operation are compiled in or out, so the hot path of a normal build
// is untouched.
#pragma once
#include <cstdint>

namespace lowtide {

namespace stats {
std::uint64_t large_live_now();  // stats.cpp: live large bytes now
}

namespace invariants {

#ifdef LOWTIDE_INVARIANTS
inline constexpr bool kEnabled = true;
#else
inline constexpr bool kEnabled = false;
#endif

// The process-wide large counters never went below zero (large::space.blocks,
// large::space.mapped, the live large bytes). nullptr, or the first violated.
const char* check_counters();

// Counters, the process's reuse cache, and (`with_arena`) the whole extent
// map of large::space.arena. nullptr, or the first violated.
const char* check_all(bool with_arena);

// One line to stderr (no malloc), then abort.
[[noreturn]] void fail(const char* what);

// After each large allocate, release and resize: check_all, with the
// arena's full walk every kArenaEvery-th time; fail() on a violation.
inline constexpr unsigned kArenaEvery = 16;
void after_large_op();

}  // namespace invariants
}  // namespace lowtide
