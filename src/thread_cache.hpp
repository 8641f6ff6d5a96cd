// A thread's cache of its freed small blocks: the layout only, so the
// counter slot that holds it (stats.hpp) need not see mimalloc. What it
// does is in small_path.hpp.
#pragma once
#include <cstdint>

namespace lowtide::small {

// Bins: one per mimalloc size class up to kCacheMax (small_path.hpp), bin 0
// for everything else (never filled: its cap is 0).
inline constexpr unsigned kCacheBins = 40;

struct ThreadCache {
  void* head[kCacheBins];  // each bin's newest block; the next one's address is in its first word
  std::uint8_t count[kCacheBins];
  const void* heap;  // the thread's mimalloc heap (whose pages are its own), set when the cache opens
};

}  // namespace lowtide::small
