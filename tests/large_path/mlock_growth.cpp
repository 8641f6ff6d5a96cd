// Growth of a locked block (issue 14 part 5's review). realloc may move a
// block and grow it with one mremap, or grow it in place with mremap
// (pal::move_grow, grow_mapping); on a locked mapping the kernel populates
// and locks what mremap grows, so a 512 MiB realloc of a block the program
// had locked would make 512 MiB resident. lowtide interposes mlock, mlock2
// and mlockall to know, and then grows by a committed tail, which is a new
// mapping and stays unpopulated. Checked for each way a block gets locked,
// with LOWTIDE_CACHE=0: a 256 KiB block with a live one behind it (so the
// growth moves), grown to 512 MiB then 1 GiB: RSS rises by far less than
// the growth. Needs CAP_IPC_LOCK (root) for mlockall; skipped (exit 77)
// otherwise, with the reason printed.
#include "lowtide_test.hpp"

#include <malloc.h>
#include <sys/mman.h>

using lt::KiB;
using lt::MiB;
using lt::opaque;
using lt::status_kib;

namespace {

void grow_locked(const char* how) {
  const std::size_t small = opaque(256 * KiB);
  char* p = static_cast<char*>(malloc(small));
  char* volatile behind = static_cast<char*>(malloc(small));
  CHECK(p != nullptr && behind != nullptr);
  behind[0] = 1;
  std::memset(p, 7, small);
  // The whole block, header page to the end of its usable size: one
  // locked mapping, which is what mremap would move and grow.
  char* lo = reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{4095});
  const std::size_t span = static_cast<std::size_t>(p + malloc_usable_size(p) - lo);
  if (std::strcmp(how, "mlock") == 0) {
    CHECK(mlock(lo, span) == 0, "mlock: %s", std::strerror(errno));
  } else if (std::strcmp(how, "mlock2") == 0) {
    CHECK(mlock2(lo, span, 0) == 0, "mlock2: %s", std::strerror(errno));
  } else {
    CHECK(mlockall(MCL_CURRENT) == 0, "mlockall: %s", std::strerror(errno));
  }
  const std::size_t rss0 = status_kib("VmRSS:");
  char* q = static_cast<char*>(realloc(p, opaque(512 * MiB)));  // moves: a block lies behind
  CHECK(q != nullptr, "realloc to 512 MiB: %s", std::strerror(errno));
  const std::size_t rss1 = status_kib("VmRSS:");
  char* r = static_cast<char*>(realloc(q, opaque(1024 * MiB)));  // in place, or moves
  CHECK(r != nullptr, "realloc to 1 GiB: %s", std::strerror(errno));
  const std::size_t rss2 = status_kib("VmRSS:");
  CHECK(r[small - 1] == 7, "%s: the block's bytes were not kept", how);
  std::printf("mlock_growth: %s: RSS +%zu KiB after the move to 512 MiB, +%zu KiB after the growth to 1 GiB\n", how,
              rss1 - rss0, rss2 - rss1);
  CHECK(rss1 - rss0 < 64 * 1024, "%s: a 512 MiB realloc of a locked block made %zu KiB resident", how, rss1 - rss0);
  CHECK(rss2 - rss1 < 64 * 1024, "%s: growing it to 1 GiB made %zu KiB resident", how, rss2 - rss1);
  CHECK(munlockall() == 0, "munlockall: %s", std::strerror(errno));
  free(r);
  free(behind);
}

}  // namespace

int main() {
  CHECK(lt::under_lowtide(), "mlock_growth: run it under LD_PRELOAD=liblowtide.so");
  const char* cache = std::getenv("LOWTIDE_CACHE");
  CHECK(cache != nullptr && std::strcmp(cache, "0") == 0, "mlock_growth: run it with LOWTIDE_CACHE=0");
  if (geteuid() != 0) {
    std::printf("SKIP mlock_growth: mlockall needs CAP_IPC_LOCK (run as root)\n");
    return 77;
  }
  grow_locked("mlock");
  grow_locked("mlock2");
  grow_locked("mlockall");
  std::printf("PASS mlock_growth\n");
  return 0;
}
