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
  // Each bin's room: its cap less the blocks it holds (small_path.hpp's
  // cache_count). Kept instead of the count so that free's fast path
  // takes room and tests for it in one instruction (`subb $1` and the sign);
  // below 0 where a bin holds more than its cap (one taken whole from the
  // shelf, or a cap put back to its base). Caps are at most kCacheBlocks
  // (64), so it fits.
  std::int8_t room[kCacheBins];
  // Each bin's cap in blocks: its class's base cap (cache_cap) when the
  // cache opens, raised by a bin that overflows (small_path.hpp,
  // cache_grow) as far as the process-wide pool allows. Every change of a
  // cap changes the room by as much (the count stays).
  std::uint8_t cap[kCacheBins];
  std::uint8_t victim;   // where cache_grow's last search for a raise to take back stopped
  std::uint32_t grown;   // bytes the caps stand above their base caps (__atomic)
  const void* heap;  // the thread's mimalloc heap (whose pages are its own), set when the cache opens
  // Open: kCacheMax - 15 (free's fast path takes a block of 16 <= size <=
  // kCacheMax, as size - 16 < take_below); closed: 0, it takes none.
  std::uint64_t take_below;
};

}  // namespace lowtide::small
