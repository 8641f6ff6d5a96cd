// Policy for reusing freed large blocks: a bounded set of committed extents
// kept after free so that a loop that frees and reallocates large buffers
// does not pay a page fault per 4 KiB again, returned to the OS when the
// byte cap is reached or when they have not been reused for the decay period.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lowtide::cache {

// How long ago `then` was, seen at `now` (both CLOCK_MONOTONIC ns). purge()
// reads the clock before the times other threads store (oldest_ns,
// last_take_ns, an entry put while it waited for the lock), so `then` can
// be later than `now`: that is age 0, not a wrapped-around huge age.
inline std::uint64_t age_ns(std::uint64_t now, std::uint64_t then) { return now > then ? now - then : 0; }

// Try to keep the extent [start, start+n) (still "used" in the arena, pages
// committed) instead of returning it. false: the caller returns it now.
// Cached extents that touch are joined into one.
bool put(std::uint32_t start, std::uint32_t n);

// A cached extent for a block of `need` granules whose start granule + skew
// is aligned to align_g granules; kNone if none. The smallest cached extent
// that fits is cut: its first `need` granules are handed out (4 * need for a
// block being grown by realloc, so the growth steps that follow land in
// place) and the rest stays cached, committed, with its age: any mix of sizes
// reuses warm pages. *got is the length handed out.
std::uint32_t take(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, bool for_growth,
                   std::uint32_t* got);

// The first n granules of the cached extent that starts at granule `at`, if
// there is one that long: a block ending at `at` grows into them in place.
bool take_at(std::uint32_t at, std::uint32_t n);

// Return everything that has been cached longer than the decay period (all of
// it when `all`). Returns the bytes given back.
std::size_t purge(bool all);

// A request the cache could not serve is about to fault `bytes` fresh:
// return, oldest first, what the cache holds beyond a small slack (8 MiB)
// after that fault, so the cache adds at most the slack to the peak.
void evict_for(std::size_t bytes);

std::size_t cached_bytes();

// Called on every large allocation: starts the decay thread the first time.
void note_large_allocation();

void init();
void fork_prepare();
void fork_parent();
void fork_child();

}  // namespace lowtide::cache
