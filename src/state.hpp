// Process-wide state shared by the paths: set once at init, read on every
// call. Kept in one place so fork handling and init see all of it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "options.hpp"

namespace lowtide {

namespace stats {
struct Slot;
}
namespace small {
struct ThreadCache;
}

enum Mode : int { kUninit = 0, kIniting = 1, kReady = 2, kForwarding = 3, kProbing = 4 };

// The process: what init decides once and every layer may read. The other
// process-wide state lives with its owner: route::settings (the cutoff),
// large::space (the reserved range and its totals), forward::probe_hit,
// and the cache's, the registry's and the sites' own statics.
struct Process {
  std::atomic<int> mode{kUninit};
  int pid = 0;
  // AT_SECURE (setuid, setgid, file capabilities): the environment is not
  // trusted, so no LOWTIDE_* or MIMALLOC_* variable is obeyed and no report
  // file may be written (report code tests this).
  bool secure = false;
  Config config{};
};

extern __attribute__((visibility("hidden"))) Process g;

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
  // This thread's errno, found once (stats::attach) so free() can keep
  // errno unchanged without a call to __errno_location on every free.
  int* errno_ptr;
  // This thread's cache of freed small blocks (small_path.hpp), in its
  // counter slot, from the slot's making until its exit destructor: open
  // (ThreadCache::take_below not 0) once the thread is warm; closed, its
  // bins are empty and free's fast path takes nothing. Never NULL, so the
  // fast paths test no pointer: before the slot is made, and from the exit
  // destructor on (stats::close_cache), it is the parked
  // cache (kParkedCache, the TLS image's initial value), whose bins are
  // empty and closed, and whose counters (slot_of) the fast paths count
  // into and nobody reads: the calls out of line see it and count again.
  small::ThreadCache* cache;
  // May the cache open (stats::attach: a slot of its own and an exit
  // destructor; cleared by that destructor)? libc.hpp's free opens it once
  // the thread has made kCacheWarm frees.
  std::uint8_t cache_armed;
  // This thread is formatting a report (stats::OwnSpan: a report, lowtide's constructor): what the
  // report's own helpers allocate (libdw naming frames, the demangler) is
  // not the program's. It raises no large peak (stats::large_live_add) and
  // is captured at no site (sites.cpp); the thread's counters are taken
  // back when the report is formatted.
  std::uint8_t in_report;
};
static_assert(sizeof(ThreadLocal) <= 64, "initial-exec TLS must stay tiny");
extern __thread ThreadLocal t_local __attribute__((tls_model("initial-exec")));
// The parked cache (ThreadLocal::cache), in a counter slot of its own that
// no registry lists (state.cpp).
extern __attribute__((visibility("hidden"))) small::ThreadCache* const kParkedCache;

std::uint32_t current_tid();

}  // namespace lowtide
