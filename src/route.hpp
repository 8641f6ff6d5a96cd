// Routing: which path serves a request, and what happens when the large
// path cannot take it. Below the C semantics (libc.hpp: errno rules,
// overflow, realloc's special cases, forwarding) and above the two paths
// (large_path.hpp, small_path.hpp). Everything here is on the slow path;
// the small-block fast path is inlined in libc.hpp.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "header.hpp"
#include "stats.hpp"

namespace lowtide::route {

// Where requests go, set at init from LOWTIDE_CUTOFF and read on every call
// (the fast path in libc.hpp compares with cutoff).
struct Settings {
  // The table's default (src/options.cpp; tests/unit checks they agree)
  // until init reads the configured value.
  std::size_t cutoff = std::size_t{128} << 10;
  // A large block shrunk by realloc moves back to the small path only below
  // this (cutoff / 2), so a block hovering at the cutoff is not copied back
  // and forth.
  std::size_t shrink_below = std::size_t{64} << 10;
  // The inlined fast paths' gates (libc.hpp), one load each instead of a
  // test per condition, set by open_fast_paths() once the process is ready
  // and closed while lowtide probes for or forwards to another malloc.
  // malloc (and operator new) take their fast path for n < malloc_fast_below:
  // below the cutoff, and within the class table (small_path.hpp) when
  // configure() verified it (0: never). free takes its fast path for a
  // pointer outside [free_slow_from, free_slow_from + free_slow_len): open,
  // the large range (whose blocks free_slow frees), so the one range test
  // free makes anyway is the gate; closed, the whole address space. Open
  // only where the freed block's size can be read from its mimalloc page
  // (small::page_size_direct).
  std::atomic<std::size_t> malloc_fast_below{0};
  std::atomic<std::uintptr_t> free_slow_from{0};
  std::atomic<std::uintptr_t> free_slow_len{UINTPTR_MAX};
  // Is p in the range free's fast path leaves to free_slow? The length
  // first: closed, it covers everything whatever the start; open, its
  // acquire sees the start open_fast_paths stored before it. The start
  // never changes once set (closing widens the length only), so no mix of
  // old and new values lets a large block through (review of issue 15).
  // On x86-64 the start is read by the `sub` itself (GCC never folds an
  // atomic load into another instruction: one `mov` more in free and in
  // realloc). The length is still loaded first, as an acquire; the asm
  // comes after it in program order, is volatile and clobbers memory, so
  // the compiler moves neither load across the other, and x86 keeps loads
  // in order.
  bool free_slow_for(const void* p) const {
    const std::uintptr_t len = free_slow_len.load(std::memory_order_acquire);
#if defined(__x86_64__)
    std::uintptr_t d = reinterpret_cast<std::uintptr_t>(p);
    bool below;
    asm volatile("{subq %[from], %[d]\n\tcmpq %[len], %[d]|sub %[d], %[from]\n\tcmp %[d], %[len]}"
                 : [d] "+r"(d), "=@ccb"(below)
                 : [from] "m"(*reinterpret_cast<const std::uintptr_t*>(&free_slow_from)), [len] "r"(len)
                 : "memory");
    return below;
#else
    const std::uintptr_t from = free_slow_from.load(std::memory_order_relaxed);
    return reinterpret_cast<std::uintptr_t>(p) - from < len;
#endif
  }
};
// Declared hidden, as the other globals the fast paths read (small_path.hpp,
// state.hpp, large_space.hpp): -fvisibility=hidden applies to definitions
// only, so a declaration without it is addressed through the GOT (a load the
// linker relaxes to a lea) before each read, one instruction more in malloc
// and in free; hidden, it is read straight from its rip-relative address.
extern __attribute__((visibility("hidden"))) Settings settings;

// From init, once the process is ready (mode kReady), and after a probe
// that found lowtide is the process's malloc.
void open_fast_paths();
// From the forwarding probe: every call takes the slow path, which knows
// the mode.
void close_fast_paths();

// A block of n bytes (n <= kMaxRequest) whose pointer is aligned to `align`
// (a power of two >= 16), counted as one `call`; zeroed when `zero`. NULL
// with errno ENOMEM when it cannot be had. Counted (histogram, bytes
// requested) as a request of `asked` bytes where given (asked <= n): pvalloc
// hands out n rounded up to a page, but the program asked for n.
void* allocate(std::size_t n, std::size_t asked, std::size_t align, Origin origin, stats::Counter call, bool zero);
// (Inline: a call through an out-of-line 5-argument form cost the slow
// paths 6 moves and a jump, the twenty-sixth stop's review.)
inline void* allocate(std::size_t n, std::size_t align, Origin origin, stats::Counter call, bool zero) {
  return allocate(n, n, align, origin, call, zero);
}

// Free p (ours, not NULL) without counting a free() call: free counts one,
// realloc counts itself. `what` names the entry point in a fatal message.
void release(void* p, const char* what);

// realloc's move or resize of p (ours, not NULL) to n bytes, 0 < n <=
// kMaxRequest, already counted as a realloc call. NULL with errno ENOMEM
// and p untouched when it cannot be done.
void* resize(void* p, std::size_t n, stats::Slot* st);
// The same for a small block p of usable size `old` staying small (n below
// the cutoff): mimalloc's realloc, counted.
void* resize_in_small(void* p, std::size_t n, stats::Slot* st, std::size_t old);

}  // namespace lowtide::route
