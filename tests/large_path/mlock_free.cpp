// Frees and mlockall (issue 14 part 5). lowtide gives a freed extent back
// as a fresh read-write mapping, merged with the free space around it
// (Arena::give_back). The kernel populates and locks every page of such a
// mapping under mlockall: MCL_CURRENT for those that exist at the call,
// MCL_FUTURE for those made after it. So lowtide interposes mlockall and
// munlockall: MCL_CURRENT first makes every free extent PROT_NONE
// (Arena::protect_free), and while MCL_FUTURE is in force frees release as
// PROT_NONE. Checked with LOWTIDE_CACHE=0 (every free releases at once):
//   - a 64 MiB block freed before mlockall(MCL_CURRENT|MCL_FUTURE), with a
//     live block after it (so its extent stays free read-write): after the
//     call none of its pages is resident (mincore);
//   - a 64 MiB block written and freed under MCL_FUTURE: RSS falls by it,
//     and none of its pages stays resident;
//   - after munlockall, a free takes the read-write release again and RSS
//     still falls.
// Needs CAP_IPC_LOCK (root) to lock this much; as another user it is
// skipped (exit 77) with the reason printed.
#include "lowtide_test.hpp"

#include <sys/mman.h>

using lt::MiB;
using lt::opaque;

using lt::status_kib;

std::size_t resident_kib(const void* p, std::size_t len) {
  const auto lo = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{4095};
  const std::size_t pages = (reinterpret_cast<std::uintptr_t>(p) + len - lo) / 4096;
  static unsigned char vec[(256 * MiB) / 4096];
  CHECK(pages <= sizeof vec);
  CHECK(mincore(reinterpret_cast<void*>(lo), pages * 4096, vec) == 0, "mincore: %s", std::strerror(errno));
  std::size_t n = 0;
  for (std::size_t i = 0; i < pages; ++i) n += vec[i] & 1;
  return n * 4;
}

int main() {
  CHECK(lt::under_lowtide(), "mlock_free: run it under LD_PRELOAD=liblowtide.so");
  const char* cache = std::getenv("LOWTIDE_CACHE");
  CHECK(cache != nullptr && std::strcmp(cache, "0") == 0, "mlock_free: run it with LOWTIDE_CACHE=0");
  if (geteuid() != 0) {
    std::printf("SKIP mlock_free: locking this much needs CAP_IPC_LOCK (run as root)\n");
    return 77;
  }
  const std::size_t size = opaque(64 * MiB);
  void* x = malloc(size);
  void* y = malloc(size);  // live after x: x's extent stays free read-write
  CHECK(x != nullptr && y != nullptr);
  std::memset(x, 1, size);
  const std::uintptr_t x_at = opaque(reinterpret_cast<std::uintptr_t>(x));  // looked at, never touched, after the free
  free(x);
  CHECK(mlockall(MCL_CURRENT | MCL_FUTURE) == 0, "mlockall: %s", std::strerror(errno));
  const std::size_t x_locked = resident_kib(reinterpret_cast<const void*>(x_at), size);

  void* a = malloc(size);
  CHECK(a != nullptr, "malloc under MCL_FUTURE: %s", std::strerror(errno));
  std::memset(a, 2, size);
  const std::uintptr_t a_at = opaque(reinterpret_cast<std::uintptr_t>(a));
  const std::size_t rss_held = status_kib("VmRSS:");
  free(a);
  const std::size_t rss_freed = status_kib("VmRSS:");
  const std::size_t a_left = resident_kib(reinterpret_cast<const void*>(a_at), size);
  CHECK(munlockall() == 0, "munlockall: %s", std::strerror(errno));

  void* c = malloc(size);
  CHECK(c != nullptr);
  std::memset(c, 3, size);
  const std::size_t rss_c = status_kib("VmRSS:");
  free(c);
  const std::size_t rss_end = status_kib("VmRSS:");
  free(y);
  std::printf("mlock_free: block freed before mlockall(MCL_CURRENT|MCL_FUTURE): %zu KiB resident after it; "
              "under MCL_FUTURE RSS %zu KiB with 64 MiB held, %zu after its free (%zu KiB of it resident); "
              "after munlockall %zu held, %zu freed\n",
              x_locked, rss_held, rss_freed, a_left, rss_c, rss_end);
  CHECK(x_locked < 1024, "mlockall(MCL_CURRENT) made %zu KiB of a freed block resident", x_locked);
  CHECK(rss_freed + 56 * 1024 < rss_held, "under MCL_FUTURE a free left RSS at %zu KiB (%zu held)", rss_freed,
        rss_held);
  CHECK(a_left < 1024, "under MCL_FUTURE %zu KiB of a freed block stayed resident", a_left);
  CHECK(rss_end + 56 * 1024 < rss_c, "after munlockall a free left RSS at %zu KiB (%zu held)", rss_end, rss_c);
  std::printf("PASS mlock_free\n");
  return 0;
}
