// Policy for reusing freed large blocks: a bounded set of committed extents
// kept after free so that a loop that frees and reallocates large buffers
// does not pay a page fault per 4 KiB again, returned to the OS when the
// byte cap is reached or when they have not been reused for the decay period.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lowtide::cache {

// Try to keep the extent [start, start+n) (still "used" in the arena, pages
// committed) instead of returning it. false: the caller returns it now.
// Cached extents that touch are joined into one.
bool put(std::uint32_t start, std::uint32_t n);

// A cached extent of `need` granules whose start granule + skew is aligned to
// align_g granules; kNone if none. The smallest cached extent that fits is
// cut: its first `need` granules are handed out and the rest stays cached,
// committed, with its age, so any mix of sizes reuses warm pages.
// `for_growth`: the block is being grown by realloc; a cached block up to 4x
// the size is taken whole, so the growth that follows happens in place.
// *got is the length handed out (need, or more for growth).
std::uint32_t take(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew_g, bool for_growth,
                   std::uint32_t* got);

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
