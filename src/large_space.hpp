// The large path's process-wide state, apart from large_path.hpp so that the
// reuse cache below it can reach the range without including the path above.
#pragma once
#include <atomic>
#include <cstddef>

#include "arena.hpp"
#include "platform.hpp"

namespace lowtide::large {

// The large path's process-wide state: the reserved range, set up at init,
// and its totals (large calls make a syscall anyway, so shared atomics cost
// nothing there).
struct Space {
  Arena arena;
  bool disabled = false;   // no reservation could be made: large blocks go to mimalloc
  // LOWTIDE_HUGEPAGES: blocks of 2 MiB and more start on a 2 MiB boundary
  // (on, advise); and are madvise(MADV_HUGEPAGE)d as well (advise only).
  bool hugepages = true;
  bool advise_huge = false;
  // LOWTIDE_POPULATE: the percent of a growing block's fresh tail faulted in
  // at its realloc (LargePath::populate_tail); 0: none.
  unsigned populate_pct = 50;
  std::atomic<std::size_t> blocks{0};  // live large blocks
  std::atomic<std::size_t> mapped{0};  // bytes committed for them (and the cache)
  // Bytes of the range lost for good: a moved block's old extent whose hole
  // (pal::move_grow) another mapping took before it was filled again. They
  // stay a used extent of the arena that nothing publishes, so nothing ever
  // maps there again.
  std::atomic<std::size_t> lost{0};
  // Holes open (between pal::move_grow and fill_hole, inside
  // pal::grow_mapping) and forks being prepared: a child must not inherit
  // a hole inside a used extent, which a free in the child would map over
  // whatever the child put there (LargePath::open_hole, before_fork).
  pal::ForkGate holes;
};
// fork's prepare handler: no new hole from now on, and the ones other
// threads hold closed (a window is a few system calls; waits at most 2 s,
// so that fork never hangs; not for the forking thread's own window, which
// a signal handler's fork interrupted: pal::ForkGate).
void fork_wait_holes();
void fork_holes_done(bool child);
// In a forked child, before the arena's and the cache's fork resets: was a
// give-back, or a cached block on trial, under way in another thread when
// the fork came? Then fork_child_reclaim, after the resets, gives back
// what that thread would have (Arena::reclaim_after_fork) and counts the
// committed bytes again (live blocks and cached ones).
bool fork_child_unfinished();
void fork_child_reclaim();
extern __attribute__((visibility("hidden"))) Space space;

}  // namespace lowtide::large
