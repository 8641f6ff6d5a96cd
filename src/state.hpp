// Process-wide state shared by the paths: set once at init, read on every
// call. Kept in one place so fork handling and init see all of it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "arena.hpp"
#include "options.hpp"

namespace lowtide {

namespace stats {
struct Slot;
}

enum Mode : int { kUninit = 0, kIniting = 1, kReady = 2, kForwarding = 3, kProbing = 4 };

struct Globals {
  std::atomic<int> mode{kUninit};
  std::size_t cutoff = std::size_t{1} << 20;
  // A large block shrunk by realloc moves back to the small path only below
  // this (cutoff/2), so a block hovering at the cutoff is not copied back and
  // forth.
  std::size_t shrink_below = std::size_t{1} << 19;
  int pid = 0;
  bool large_disabled = false;  // no reservation could be made
  // AT_SECURE (setuid, setgid, file capabilities): the environment is not
  // trusted, so no LOWTIDE_* or MIMALLOC_* variable is obeyed and no report
  // file may be written (report code tests this).
  bool secure = false;
  bool hugepages = true;
  std::atomic<bool> warned_full{false};
  std::atomic<bool> warned_too_big{false};
  std::atomic<bool> warned_no_mapping{false};
  std::atomic<bool> probe_hit{false};  // see forward::detect()
  Config config{};
  // Process-wide large-path totals (large calls make a syscall anyway, so a
  // shared atomic costs nothing there).
  std::atomic<std::size_t> large_blocks{0};
  std::atomic<std::size_t> large_mapped{0};
  Arena arena;
};

extern Globals g;

// Initial-exec TLS, deliberately tiny (a large static TLS block makes later
// dlopen()s fail): anything per-thread that must outlive the thread lives in
// memory lowtide maps itself and is reached through a pointer here.
struct ThreadLocal {
  stats::Slot* stats;     // this thread's counters (stats.hpp)
  std::uint32_t tid;      // cached kernel tid; 0 = not yet known
  std::uint16_t in_init;  // this thread is running first-call init
  std::uint16_t in_capture;  // this thread is capturing a stack (sites.cpp)
  std::int64_t site_left;    // bytes of large allocations until the next capture
  std::uint64_t site_rng;    // sampling PRNG state; 0 = not seeded yet
};
static_assert(sizeof(ThreadLocal) <= 64, "initial-exec TLS must stay tiny");
extern __thread ThreadLocal t_local __attribute__((tls_model("initial-exec")));

std::uint32_t current_tid();

}  // namespace lowtide
