// Mechanism for large blocks: carve, commit, resize, release. Which requests
// come here (the cutoff, hysteresis, fallbacks) is decided by the caller.
#pragma once
#include <atomic>
#include <cstddef>

#include "arena.hpp"
#include "large_space.hpp"
#include "header.hpp"
#include "platform.hpp"

namespace lowtide {
namespace cache {
class ReuseCache;
}
namespace stats {
struct Slot;
}

namespace large {


// no_memory: out of memory (ENOMEM), by the kernel's overcommit check.
// no_room: the reserved range cannot take the block; no_mapping: the kernel
// would not map it now (vm.max_map_count, RLIMIT_DATA, an mlock limit). On
// both the caller may fall back to mimalloc. no_alignment: no place in the
// range, however empty, is aligned as asked (the alignment is about as large
// as the range); decided before anything is touched, so the caller may hand
// the request on without a warning about the range.
enum class Result { ok, no_memory, no_room, no_mapping, no_alignment };

// `asked` for the counters' bytes requested: the size itself (kAskedIsSize)
// unless the program asked for less (pvalloc's page rounding).
constexpr std::size_t kAskedIsSize = ~std::size_t{0};

// A fresh zeroed block of `size` bytes whose user pointer is aligned to
// `align` (a power of two >= 16), counted as `asked` bytes requested.
Result allocate(std::size_t size, std::size_t align, Origin origin, std::uint8_t flags, void** out,
                std::size_t asked = kAskedIsSize);

// Give the block's pages back to the OS. Aborts with glibc's kind of message
// on a pointer that is not a live large block. `what` names the caller.
void release(void* p, const char* what);

// Resize keeping the block on the large path; *out is the (possibly moved)
// pointer. On any other result p is left intact. Grows in place when the
// following extent is free, else moves the pages with mremap, else copies.
Result resize(void* p, std::size_t size, void** out);

// Bytes usable at p; aborts on an invalid pointer.
std::size_t usable(const void* p, const char* what);

// After the kernel refused memory: the reuse cache given back, and under a
// finite RLIMIT_DATA the read-write free space between live blocks made
// PROT_NONE (LargePath::give_up_held) where the limit can have refused
// `want` bytes. Whether anything was given up.
bool give_up_held(std::size_t want);

// The large path over what it works on: an arena, the reuse cache cutting
// and joining extents in it, and the page operations (tests/unit drive one
// over a fake platform). The functions above are the process's instance:
// large::space.arena, cache::production(), pal::kPageOps (wired in large_path.cpp).
// Process-wide totals (large::space.mapped, large::space.blocks), the counters and the
// call sites are kept by every instance.
class LargePath {
 public:
  constexpr LargePath(Arena& arena, cache::ReuseCache& cache, const pal::PageOps& ops,
                      void (*on_allocation)() = nullptr)
      : a_(arena), cache_(cache), ops_(ops), on_allocation_(on_allocation) {}

  Result allocate(std::size_t size, std::size_t align, Origin origin, std::uint8_t flags, void** out,
                  std::size_t asked = kAskedIsSize);
  void release(void* p, const char* what);
  Result resize(void* p, std::size_t size, void** out);
  std::size_t usable(const void* p, const char* what) const;
  bool give_up_held(std::size_t want);

 private:
  struct Plan;
  struct Change;
  Result plan(std::size_t size, std::size_t align, Plan* pl) const;
  Extent take_cached(Plan* pl, bool for_growth);
  Result commit_fresh(Plan* pl, Extent* out, std::size_t* stale);
  std::uint32_t alloc_room(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew, std::uint32_t* gap,
                           Result* why);
  enum class Warm { none, tried, done };
  Warm commit_warm(Plan* pl, Extent* out, std::size_t* stale);
  void return_to_os(Extent e, stats::Slot* st, unsigned why);  // why: a stats::Counter
  Extent live_extent(const void* p, const char* what) const;
  void account(const Change& c, unsigned how);
  Result shrink_in_place(Change& c, void** out);
  bool grow_into_cache(Change& c);
  bool grow_in_place(Change& c);
  Result grow_onto_fresh(Change& c, void** out);
  void populate_tail(const Change& c, char* from, const char* end);
  bool may_make_holes(std::size_t grows_by) const;
  bool open_hole();
  void close_hole();
  void lose(int slot, Extent e);
  void lose_refused(Extent e);
  template <typename Call>
  bool in_hole_window(const Extent* held, bool* ours, int n, const Call& call);
  pal::Moved move_into(char* src, std::size_t len, Extent to);
  Result undo_lost_move(Change& c, Extent to, bool warm, const pal::Moved& m);
  Result find_new_extent(Change& c, Extent* to, bool* warm);
  Result move_block(Change& c, void** out);
  // moved: bytes of the old extent's front move_pages moved before it was
  // refused. committed: `to` is read-write throughout (a cached block no
  // move unmapped a piece of); cached: `to` was a cached block.
  Result copy_instead(Change& c, Extent to, bool committed, bool cached, std::size_t moved);
  // old_mapped false: the old extent is lost (a hole move_grow left was taken).
  void finish_move(Change& c, Extent to, bool warm, bool moved, void** out, bool old_mapped = true);

  Arena& a_;
  cache::ReuseCache& cache_;
  const pal::PageOps& ops_;
  void (*on_allocation_)();
  // Set once mremap refused to move a cached block into a miss's block
  // (commit_warm): from then on misses only grow cached blocks in place.
  std::atomic<bool> moves_refused_{false};
  // How large blocks grown by realloc have lately ended up, in granules: a
  // max that drifts down by an eighth of the gap at each smaller one freed
  // (note_grown). A block starting to grow, or moving as it grows, looks
  // for a cached extent this long first (ReuseCache::take's prefer), so
  // that it does not outgrow the extent and move again, dropping the warm
  // pages under its moved front. A hint: racy updates only blur it.
  std::atomic<std::uint32_t> grown_g_{0};
  void note_grown(std::uint32_t n);
};

}  // namespace large
}  // namespace lowtide
