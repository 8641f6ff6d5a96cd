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
