// A block grown by realloc onto fresh pages has the first LOWTIDE_POPULATE
// percent (50 by default) of its new room faulted in by the realloc itself
// (LargePath::populate_tail), and the rest faults as the program writes it;
// not at a malloc'd block's first growth, and at most an eighth of the old
// size. A buffer of 4 MiB, written, grown to 8 MiB (nothing populated in
// any mode), written, grown by an eighth to 9 MiB:
//   `on` (the default): right after the realloc, 40-60 % of the new room is
//     resident, large.populated says as much, and the rest of the room
//     (past 60 %) is not; the old bytes are kept, and the whole block then
//     holds what is written to it;
//   `off` (LOWTIDE_POPULATE=0): none of the new room is resident;
//   `limit` (LOWTIDE_LIMIT=2MiB, which any process is over): none either:
//     pages the program may never write must not count against a limit.
#include "../lowtide_stats.hpp"

#include <string>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kOld = 8 * MiB;
constexpr std::size_t kNew = 9 * MiB;

// Resident pages of [lo, hi), both page-aligned.
std::size_t resident_pages(std::uintptr_t lo, std::uintptr_t hi) {
  return lt::resident_bytes(reinterpret_cast<const void*>(lo), hi - lo) / kPage;
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 2, "usage: populate on|off|limit");
  const std::string mode = argv[1];
  auto* p0 = static_cast<unsigned char*>(std::malloc(opaque(kOld / 2)));
  CHECK(p0 != nullptr);
  std::memset(p0, 0x5a, kOld / 2);
  const std::uint64_t at_malloc = lt::read_stats().large_populated;
  auto* p = static_cast<unsigned char*>(std::realloc(p0, opaque(kOld)));
  CHECK(p != nullptr);
  CHECK(lt::read_stats().large_populated == at_malloc, "%s: a malloc'd block's first growth populated %llu bytes",
        mode.c_str(), static_cast<unsigned long long>(lt::read_stats().large_populated - at_malloc));
  std::memset(p + kOld / 2, 0x5a, kOld / 2);
  const std::uint64_t before = lt::read_stats().large_populated;
  auto* q = static_cast<unsigned char*>(std::realloc(p, opaque(kNew)));
  CHECK(q != nullptr);
  const std::uint64_t populated = lt::read_stats().large_populated - before;
  // The new room: from the first whole page past the old bytes (the old
  // block's extent ends at most a granule past them) to the new end.
  const auto lo = (reinterpret_cast<std::uintptr_t>(q) + kOld + 64 * KiB + kPage - 1) & ~(kPage - 1);
  const auto hi = (reinterpret_cast<std::uintptr_t>(q) + kNew) & ~(kPage - 1);
  const std::size_t room = (hi - lo) / kPage;
  const std::size_t first = resident_pages(lo, lo + (hi - lo) * 4 / 10 / kPage * kPage);
  const std::size_t all = resident_pages(lo, hi);
  const std::size_t past = resident_pages((lo + (hi - lo) * 6 / 10) & ~(kPage - 1), hi);
  std::printf("%s: %zu of %zu pages of the new room resident (%zu of the first 40 %%, %zu past 60 %%); "
              "large.populated +%llu KiB\n",
              mode.c_str(), all, room, first, past, static_cast<unsigned long long>(populated / KiB));
  if (mode == "on") {
    CHECK(first == (hi - lo) * 4 / 10 / kPage, "the first 40 %% of the new room is not all resident: %zu pages",
          first);
    CHECK(past == 0, "%zu pages past 60 %% of the new room resident", past);
    CHECK(populated >= (kNew - kOld) * 4 / 10 && populated <= (kNew - kOld) * 6 / 10,
          "large.populated %llu for %zu new bytes", static_cast<unsigned long long>(populated), kNew - kOld);
  } else {
    CHECK(mode == "off" || mode == "limit", "mode %s", mode.c_str());
    CHECK(all == 0, "%s: %zu pages of the new room resident", mode.c_str(), all);
    CHECK(populated == 0, "%s: large.populated +%llu", mode.c_str(), static_cast<unsigned long long>(populated));
  }
  for (std::size_t i = 0; i < kOld; ++i) CHECK(q[i] == 0x5a, "old byte %zu lost", i);
  std::memset(q + kOld, 0xa5, kNew - kOld);
  for (std::size_t i = kOld; i < kNew; i += 4093) CHECK(q[i] == 0xa5, "new byte %zu", i);
  std::free(q);
  std::printf("ok\n");
  return 0;
}
