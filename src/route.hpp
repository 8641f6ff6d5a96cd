// Routing: which path serves a request, and what happens when the large
// path cannot take it. Below the C semantics (libc.hpp: errno rules,
// overflow, realloc's special cases, forwarding) and above the two paths
// (large_path.hpp, small_path.hpp). Everything here is on the slow path;
// the small-block fast path is inlined in libc.hpp.
#pragma once
#include <cstddef>

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
};
extern Settings settings;

// A block of n bytes (n <= kMaxRequest) whose pointer is aligned to `align`
// (a power of two >= 16), counted as one `call`; zeroed when `zero`. NULL
// with errno ENOMEM when it cannot be had.
void* allocate(std::size_t n, std::size_t align, Origin origin, stats::Counter call, bool zero);

// Free p (ours, not NULL) without counting a free() call: free counts one,
// realloc counts itself. `what` names the entry point in a fatal message.
void release(void* p, const char* what);

// realloc's move or resize of p (ours, not NULL) to n bytes, 0 < n <=
// kMaxRequest, already counted as a realloc call. NULL with errno ENOMEM
// and p untouched when it cannot be done.
void* resize(void* p, std::size_t n, stats::Slot* st);

}  // namespace lowtide::route
