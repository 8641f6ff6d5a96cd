// Large blocks touched in one byte cost about one page each, as under glibc
// (issue 14, item 2). Blocks of 3000 KiB, 8 MiB and 64 MiB, from malloc and
// from calloc (a sparse hash table, a zeroed array filled in part), each
// written in one byte in its middle: the pages resident in the blocks
// themselves (mincore over each block, which counts a huge page as its 512
// small ones) and the RSS the process gained must both stay within the
// pages written plus 8 MiB. When lowtide advised these blocks for huge
// pages, each touched 2 MiB region was resident whole: 2-4 MiB per block,
// over 400 MiB here in all.
#include "../lowtide_test.hpp"

#include <sys/mman.h>

#include <vector>

using lt::KiB;
using lt::MiB;
using lt::opaque;
using lt::resident_bytes;

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kSlack = 8 * MiB;

std::size_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  CHECK(f != nullptr);
  unsigned long size = 0, resident = 0;
  CHECK(std::fscanf(f, "%lu %lu", &size, &resident) == 2);
  std::fclose(f);
  return resident * kPage;
}

struct Case {
  std::size_t size;
  int count;
};

}  // namespace

int main() {
  CHECK(!lt::under_lowtide() || dlsym(RTLD_DEFAULT, "lowtide_version") != nullptr, "not running under lowtide");
  const Case cases[] = {{3000 * KiB, 40}, {8 * MiB, 24}, {64 * MiB, 4}};
  std::vector<std::pair<unsigned char*, std::size_t>> blocks;
  blocks.reserve(2 * (40 + 24 + 4));
  const std::size_t rss_before = rss_bytes();
  std::size_t written = 0;
  for (bool zeroed : {false, true}) {
    for (const Case& c : cases) {
      for (int i = 0; i < c.count; ++i) {
        void* v = zeroed ? std::calloc(1, opaque(c.size)) : std::malloc(opaque(c.size));
        CHECK(v != nullptr, "%s(%zu) failed", zeroed ? "calloc" : "malloc", c.size);
        auto* p = static_cast<unsigned char*>(v);
        // One byte in the middle; the allocator's own header, if it has one,
        // may be in the first page (counted as written too).
        opaque(p)[c.size / 2] = 1;
        written += 2 * kPage;
        blocks.emplace_back(p, c.size);
      }
    }
  }
  const std::size_t rss_added = rss_bytes() - rss_before;
  std::size_t resident = 0;
  for (const auto& [p, n] : blocks) resident += resident_bytes(p, n);
  std::printf("%zu blocks, %zu KiB written: %zu KiB resident in them, RSS +%zu KiB (bound: written + %zu KiB)\n",
              blocks.size(), written / KiB, resident / KiB, rss_added / KiB, kSlack / KiB);
  CHECK(resident <= written + kSlack, "the blocks hold %zu KiB for %zu KiB written", resident / KiB, written / KiB);
  CHECK(rss_added <= written + kSlack, "RSS grew by %zu KiB for %zu KiB written", rss_added / KiB, written / KiB);
  for (const auto& [p, n] : blocks) std::free(p);
  return 0;
}
