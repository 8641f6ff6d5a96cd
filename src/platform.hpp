// The only place lowtide talks to the kernel: mappings, advice, raw file
// reads. Nothing here allocates, so every function is safe inside malloc.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lowtide::pal {

constexpr std::size_t kPageSize = 4096;

// Reserve address space: PROT_NONE, MAP_NORESERVE. nullptr on failure.
void* reserve(std::size_t len);
// Reserve len bytes aligned to `align` (a power of two >= page size).
void* reserve_aligned(std::size_t len, std::size_t align);
// Atomically replace [p, p+len) with fresh read-write zero pages.
bool commit_fixed(void* p, std::size_t len);
// Atomically replace [p, p+len) with reserved PROT_NONE space, dropping the
// pages. Never leaves a hole another thread's mmap could land in.
bool decommit_fixed(void* p, std::size_t len);
// Move the pages of [src, src+len) to dst (which must be a reservation of
// ours) without unmapping src: MREMAP_DONTUNMAP keeps src mapped, so no hole
// appears. Fails on old kernels and on ranges that span several VMAs.
bool move_pages(void* src, std::size_t len, void* dst);
// Drop the pages but keep the mapping (fallback when the VMA limit is hit).
bool discard(void* p, std::size_t len);
// Ask for transparent huge pages on [p, p+len) (best effort).
void advise_hugepage(void* p, std::size_t len);
void unmap(void* p, std::size_t len);
// Fresh read-write zero memory for lowtide's own tables, committed as it is
// touched (MAP_NORESERVE). nullptr on failure.
void* map_lazy(std::size_t len);

// Unbuffered write to fd 2, looping over partial writes.
void write_stderr(const char* s, std::size_t n);
// Read a whole small file (e.g. under /proc) into buf; returns bytes read or
// -1. buf is NUL-terminated.
long read_file(const char* path, char* buf, std::size_t cap);
// Resident set size in bytes from /proc/self/statm, 0 if unreadable.
std::size_t rss_bytes();
int current_tid();

}  // namespace lowtide::pal
