// Call sites of large blocks (LOWTIDE_SITES): which stacks allocate them,
// sampled by bytes, with per-site totals kept in a fixed table lowtide maps
// itself. A site is the hash of the whole captured stack.
//
// Sampling is a Poisson process over bytes of large allocations, as heap
// profilers do: each thread counts down a random number of bytes drawn from
// an exponential distribution of mean LOWTIDE_SITE_SAMPLE; the allocation
// that crosses zero is captured. A block of s bytes is then captured with
// probability p = 1 - exp(-s/T), and stands for 1/p blocks (its weight) in
// every per-site figure, which makes each figure an unbiased estimate.
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

// On every fresh large allocation (not resizes), before any lock is taken:
// the capture may unwind and look up modules.
inline Sample on_allocate(std::size_t size) {
  if (__builtin_expect(!enabled.load(std::memory_order_relaxed), 1)) return {0, 0};
  ThreadLocal& t = t_local;
  t.site_left -= static_cast<std::int64_t>(size > (std::size_t{1} << 62) ? std::size_t{1} << 62 : size);
  if (__builtin_expect(t.site_left > 0, 1)) return {0, 0};
  return sample_slow(size);
}

// Per-site accounting, in usable bytes scaled by the block's weight.
void allocated(const Sample& s, std::size_t usable);
void released(const BlockHeader* h, const void* user, std::size_t usable);
void resized(const BlockHeader* h, std::size_t old_usable, std::size_t new_usable, bool moved);

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
  std::uint64_t sampled;      // blocks actually captured
  double blocks, bytes;       // allocated (scaled)
  double live_blocks, live_bytes, peak_bytes, remaps;
  std::uint32_t nframes;
  const Frame* frames;        // in the table (stable, never freed)
};

struct ModuleInfo {
  const char* path;
  std::uintptr_t bias;  // load bias when first seen
};

std::uint64_t interval();
std::uint32_t shown();  // LOWTIDE_SITES
// Every site with a capture, unsorted; returns how many were written.
std::size_t read_sites(SiteRow* out, std::size_t cap);
std::size_t count();  // sites in the table (read_sites returns at most this + 1)
ModuleInfo module(std::uint32_t i);
bool table_full();

}  // namespace lowtide::sites
