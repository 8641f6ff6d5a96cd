// Mechanism for large blocks: carve, commit, resize, release. Which requests
// come here (the cutoff, hysteresis, fallbacks) is decided by the caller.
#pragma once
#include <cstddef>

#include "header.hpp"

namespace lowtide::large {

// no_memory: out of memory (ENOMEM), by the kernel's overcommit check.
// no_room: the reserved range cannot take the block; no_mapping: the kernel
// would not map it now (vm.max_map_count, RLIMIT_DATA, an mlock limit). On
// both the caller may fall back to mimalloc. no_alignment: no place in the
// range, however empty, is aligned as asked (the alignment is about as large
// as the range); decided before anything is touched, so the caller may hand
// the request on without a warning about the range.
enum class Result { ok, no_memory, no_room, no_mapping, no_alignment };

// A fresh zeroed block of `size` bytes whose user pointer is aligned to
// `align` (a power of two >= 16).
Result allocate(std::size_t size, std::size_t align, Origin origin, std::uint8_t flags, void** out);

// Give the block's pages back to the OS. Aborts with glibc's kind of message
// on a pointer that is not a live large block. `what` names the caller.
void release(void* p, const char* what);

// Resize keeping the block on the large path; *out is the (possibly moved)
// pointer. On any other result p is left intact. Grows in place when the
// following extent is free, else moves the pages with mremap, else copies.
Result resize(void* p, std::size_t size, void** out);

// Bytes usable at p; aborts on an invalid pointer.
std::size_t usable(const void* p, const char* what);

}  // namespace lowtide::large
