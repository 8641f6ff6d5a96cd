// mlockall(MCL_CURRENT) and the reuse cache (reliability.md no. 45). The
// kernel populates and locks every read-write page of the process at the
// call, and a cached block is a used, read-write extent: 64 freed blocks
// of 4 MiB, one byte of each written, made RSS rise by 256 MiB at the call
// (glibc: ~1 MiB). The cache is now emptied first, its blocks released
// PROT_NONE. Checked: RSS rises by less than 96 MiB at the call (mimalloc's
// first segment, read-write whole, costs 32: mlock_tables), with 256 MiB of
// blocks cached before it.
// Needs CAP_IPC_LOCK (root) to lock this much; as another user it is
// skipped (exit 77) with the reason printed.
#include "lowtide_test.hpp"
#include "../lowtide_stats.hpp"

#include <sys/mman.h>

using lt::MiB;
using lt::opaque;
using lt::status_kib;

int main() {
  CHECK(lt::under_lowtide(), "mlock_cache: run it under LD_PRELOAD=liblowtide.so");
  if (geteuid() != 0) {
    std::printf("SKIP mlock_cache: locking this much needs CAP_IPC_LOCK (run as root)\n");
    return 77;
  }
  void* blocks[64];
  for (void*& b : blocks) {
    b = malloc(opaque(4 * MiB));
    CHECK(b != nullptr);
    static_cast<char*>(b)[0] = 1;
  }
  for (void* b : blocks) free(b);
  const std::uint64_t cached = lt::read_stats().large_cached_bytes;
  CHECK(cached >= 128 * MiB, "only %llu bytes cached: the case needs the cache to keep the blocks",
        static_cast<unsigned long long>(cached));
  const std::size_t before = status_kib("VmRSS:");
  CHECK(mlockall(MCL_CURRENT) == 0, "mlockall: %s", std::strerror(errno));
  const std::size_t after = status_kib("VmRSS:");
  // Large blocks still work, and are locked as the call asked (not MCL_FUTURE:
  // new ones are not).
  void* p = malloc(opaque(4 * MiB));
  CHECK(p != nullptr);
  std::memset(p, 1, 4 * MiB);
  free(p);
  CHECK(munlockall() == 0, "munlockall: %s", std::strerror(errno));
  std::printf("mlock_cache: %llu bytes cached; RSS %zu KiB before mlockall(MCL_CURRENT), %zu after (+%zu)\n",
              static_cast<unsigned long long>(cached), before, after, after - before);
  CHECK(after < before + 96 * 1024, "mlockall(MCL_CURRENT) made %zu KiB resident", after - before);
  std::printf("PASS mlock_cache\n");
  return 0;
}
