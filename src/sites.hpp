// Call sites of large blocks (LOWTIDE_SITES): which stacks allocate them,
// sampled by bytes, with per-site totals kept in a fixed table lowtide maps
// itself. A site is the hash of the whole captured stack.
//
// Sampling is a Poisson process over the bytes the large path hands out, as
// heap profilers do: each thread counts down a random number of bytes drawn
// from an exponential distribution of mean T = LOWTIDE_SITE_SAMPLE; the
// allocation that crosses zero is captured. A block of s bytes is then
// captured with probability p(s) = 1 - exp(-s/T), and stands for 1/p blocks
// (its weight) in every per-site figure, which makes each figure an unbiased
// estimate.
//
// A realloc that grows a block from a to b bytes hands out b - a new bytes,
// and those (not b again) go through the same countdown: the growth is a
// piece of its own, captured with p(b - a) and weighted 1/p(b - a). A block
// keeps one site: the stack of its first captured piece (its allocation, or
// the realloc that first crossed a sample point; later captured growth adds
// to that site without unwinding again). The block's header holds what it
// added to its site's live bytes; a free takes that back, a shrink to c
// bytes keeps the share c/b (proportional, so the estimate stays unbiased).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "header.hpp"
#include "state.hpp"

namespace lowtide::sites {

constexpr std::uint32_t kSites = 4096;     // table slots; id 0 = none, 1 = table full (ids fit the arena's 12-bit tag)
constexpr std::uint32_t kFullSite = 1;
constexpr int kMaxFrames = 64;
constexpr std::uint32_t kWeightOne = 256;  // weights are fixed-point, 1/256ths

extern std::atomic<bool> enabled;  // set once, by the constructor

struct Sample {
  std::uint32_t site;    // 0: not sampled
  std::uint32_t weight;  // blocks this one stands for, in 1/256ths
};

Sample sample_slow(std::size_t size);
Sample grow_slow(const BlockHeader* h, const void* user, std::size_t grown);

// On every fresh large allocation (not resizes), before any lock is taken:
// the capture may unwind and look up modules.
inline Sample on_allocate(std::size_t size) {
  if (__builtin_expect(!enabled.load(std::memory_order_relaxed), 1)) return {0, 0};
  ThreadLocal& t = t_local;
  t.site_left -= static_cast<std::int64_t>(size > (std::size_t{1} << 62) ? std::size_t{1} << 62 : size);
  if (__builtin_expect(t.site_left > 0, 1)) return {0, 0};
  return sample_slow(size);
}

// Before a realloc grows the large block `user` (old_usable bytes) to
// `size`, before any lock is taken: the size - old_usable new bytes go
// through the countdown. The result goes to resized() once the block has
// grown (and is dropped if it could not).
inline Sample on_grow(const BlockHeader* h, const void* user, std::size_t old_usable, std::size_t size) {
  if (__builtin_expect(!enabled.load(std::memory_order_relaxed), 1) || size <= old_usable) return {0, 0};
  ThreadLocal& t = t_local;
  std::size_t grown = size - old_usable;
  t.site_left -= static_cast<std::int64_t>(grown > (std::size_t{1} << 62) ? std::size_t{1} << 62 : grown);
  if (__builtin_expect(t.site_left > 0, 1)) return {0, 0};
  return grow_slow(h, user, grown);
}

// Per-site accounting, in usable bytes scaled by the weights. allocated()
// also records in the block's header what it added (h->site_bytes).
void allocated(BlockHeader* h, const Sample& s, std::size_t usable);
void released(const BlockHeader* h, const void* user, std::size_t usable);
// `grow`: on_grow's result for this resize. Returns true when the block got
// its site here (it had none): the caller re-publishes the arena's tag.
bool resized(BlockHeader* h, std::size_t old_usable, std::size_t new_usable, bool moved, const Sample& grow);

// Start-up, from lowtide's constructor (never inside malloc): loads
// libunwind when LOWTIDE_SITES is set.
void start();

// fork: no capture may be half-way through (libunwind's and the table's
// locks) when the process forks; prepare waits (bounded) for those in flight
// and turns new ones away until the fork is done.
void fork_prepare();
void fork_parent();
void fork_child();

// --- reading, at report time -------------------------------------------

struct Frame {
  std::uint32_t module;  // index into the module table; kNoModule: unknown
  std::uint64_t offset;  // ip - the module's load bias (an ELF address), or the ip
  std::uintptr_t ip;     // as captured
};
constexpr std::uint32_t kNoModule = UINT32_MAX;

struct SiteRow {
  std::uint32_t id;
  std::uint64_t sampled;      // pieces actually captured (allocations and realloc growths)
  double blocks, bytes;       // allocated (scaled)
  double live_blocks, live_bytes, peak_bytes, remaps;
  double at_peak_bytes;       // live bytes in the heap-at-peak snapshot (see AtPeak)
  std::uint32_t nframes;
  const Frame* frames;        // in the table (stable, never freed)
};

struct ModuleInfo {
  const char* path;
  std::uintptr_t bias;  // load bias when first seen
};

// The heap at the process's peak: a copy of every site's live bytes taken
// at the first free or shrink after the process's large live bytes reached
// a new peak (the sites' figures are then still as they were at the peak),
// unless the peak has risen by less than 1/4096 since the last copy (which
// bounds the copies: about 4096 per e-fold of the peak, each one load and
// store per site in the table).
struct AtPeak {
  std::uint64_t taken_at;  // the process's large peak when the copy was taken (0: none yet)
};

std::uint64_t interval();
std::uint32_t shown();  // LOWTIDE_SITES
// Every site with a capture, unsorted; returns how many were written.
// *at_peak (may be null) describes the snapshot the rows' at_peak_bytes
// come from.
std::size_t read_sites(SiteRow* out, std::size_t cap, AtPeak* at_peak = nullptr);
std::size_t count();  // sites in the table (read_sites returns at most this + 1)
ModuleInfo module(std::uint32_t i);
bool table_full();

}  // namespace lowtide::sites
