// A block mimalloc aligned to 32 MiB or more (the large path refused it:
// LOWTIDE_RESERVE=64M cannot hold such alignments, so they go to mimalloc,
// which gives them a segment of their own and the block a 32 MiB boundary)
// whose first bytes look like a slice entry of a small page: free must
// find its page as mimalloc does (from p - 1), not read the block's own
// data as one. The code before 2026-12-05 (thirteenth stop) put such a
// block into the 64-byte bin, and the next malloc(64) returned it.
#include "../lowtide_test.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "../lowtide_stats.hpp"

int main() {
  lt::arm_watchdog(60, "huge_align_free");
  // The thread's cache opens from its 256th free on.
  void* warm[300];
  for (void*& w : warm) w = lt::opaque(std::malloc(64));
  for (void* w : warm) std::free(w);
  int via_mimalloc = 0;
  for (std::size_t align = std::size_t{32} << 20; align <= std::size_t{1} << 40; align <<= 1) {
    const std::uint64_t maps = lt::read_stats().large_maps;
    void* p = nullptr;
    if (posix_memalign(&p, align, 200000) != 0) continue;
    const bool mimalloc = lt::read_stats().large_maps == maps;
    // A slice entry's fields at the block's start: block size 64 (at
    // 0x108 + 0x1c), flags 0 (no aligned blocks).
    auto* b = static_cast<volatile unsigned char*>(p);
    for (int i = 0; i < 0x200; ++i) b[i] = 0;
    b[0x124] = 64;
    std::free(lt::opaque(p));
    if (!mimalloc) continue;
    ++via_mimalloc;
    void* got[200];
    for (void*& q : got) {
      q = lt::opaque(std::malloc(64));
      CHECK(q != p, "malloc(64) handed out the freed block aligned to %zu MiB (%p)", align >> 20, p);
    }
    for (void* q : got) std::free(q);
  }
  CHECK(via_mimalloc > 0, "no alignment reached mimalloc: nothing was tested");
  std::printf("huge_align_free: ok (%d alignments served by mimalloc)\n", via_mimalloc);
  return 0;
}
