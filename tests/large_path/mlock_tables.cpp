// mlockall(MCL_CURRENT) and lowtide's own tables (reliability.md no. 19).
// The kernel populates and locks every read-write page of the process at
// the call. lowtide's range tables are 20 bytes per 64 KiB granule of the
// reserved range: 320 MiB for the default 1 TiB. Mapped read-write whole
// (if untouched), they made a C program that calls mlockall go from 3.5 MiB
// to 364 MiB resident and locked. They are now reserved PROT_NONE and opened
// as the range is carved, so the call costs what mimalloc's own first
// segment costs (32 MiB, read-write whole: raw mimalloc pays it too).
// Checked: RSS rises by less than 96 MiB at the call, with a large block
// live (so the tables are in use), and large blocks still work after it,
// including ones that carve new parts of the range (tables opened under
// the lock).
// Needs CAP_IPC_LOCK (root) to lock this much; as another user it is
// skipped (exit 77) with the reason printed.
#include "lowtide_test.hpp"

#include <sys/mman.h>

using lt::MiB;
using lt::opaque;
using lt::status_kib;

int main() {
  CHECK(lt::under_lowtide(), "mlock_tables: run it under LD_PRELOAD=liblowtide.so");
  if (geteuid() != 0) {
    std::printf("SKIP mlock_tables: locking this much needs CAP_IPC_LOCK (run as root)\n");
    return 77;
  }
  void* small = malloc(opaque(std::size_t{100}));
  void* big = malloc(opaque(4 * MiB));
  CHECK(small != nullptr && big != nullptr);
  std::memset(big, 1, 4 * MiB);
  const std::size_t before = status_kib("VmRSS:");
  CHECK(mlockall(MCL_CURRENT) == 0, "mlockall: %s", std::strerror(errno));
  const std::size_t after = status_kib("VmRSS:");
  // 40 blocks of 200 MiB of address space (never written): 8 GiB of the
  // range carved, opening its tables 256 MiB of range at a time.
  void* blocks[40];
  for (void*& b : blocks) {
    b = malloc(opaque(200 * MiB));
    CHECK(b != nullptr, "malloc(200 MiB) after mlockall: %s", std::strerror(errno));
    static_cast<char*>(b)[0] = 1;
  }
  for (void* b : blocks) free(b);
  const std::size_t end = status_kib("VmRSS:");
  CHECK(munlockall() == 0, "munlockall: %s", std::strerror(errno));
  free(big);
  free(small);
  std::printf("mlock_tables: RSS %zu KiB before mlockall(MCL_CURRENT), %zu after (+%zu); %zu after 40 large "
              "blocks\n",
              before, after, after - before, end);
  CHECK(after < before + 96 * 1024, "mlockall(MCL_CURRENT) made %zu KiB resident", after - before);
  std::printf("PASS mlock_tables\n");
  return 0;
}
