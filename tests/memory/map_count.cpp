// Mappings come back (issue 14, item 5; issue 6 met vm.max_map_count). Run
// with LOWTIDE_CACHE=0, so every free releases at once. Large blocks
// committed one after another share one mapping; a free between live
// blocks costs at most two; and once every block is freed the count is
// back where it started (within a constant) even for blocks whose pages
// realloc moved with mremap and blocks the program advised MADV_HUGEPAGE
// (as numpy does its arrays): both are mappings of their own while live,
// which a release that only drops pages (MADV_DONTNEED) would leave behind
// after the free (docs/design-notes.md, "Mappings"); while they live, a
// buffer grown by realloc stays about one mapping. Then calloc over the
// recommitted range must read zeros where the freed blocks were written.
#include "../lowtide_test.hpp"

#include <fcntl.h>
#include <sys/mman.h>

#include <vector>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

constexpr std::size_t kSlack = 16;  // mappings others may add meanwhile (mimalloc, stdio)

std::size_t vmas() {
  static char buf[1 << 16];
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0, "open /proc/self/maps: %s", std::strerror(errno));
  std::size_t n = 0;
  for (;;) {
    const ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    CHECK(r >= 0, "read /proc/self/maps: %s", std::strerror(errno));
    if (r == 0) break;
    for (ssize_t i = 0; i < r; ++i) n += buf[i] == '\n';
  }
  close(fd);
  return n;
}

bool all_zero(const void* p, std::size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; i += 512)
    if (c[i] != 0) return false;
  return c[n - 1] == 0;
}

}  // namespace

int main() {
  CHECK(lt::under_lowtide(), "map_count: run it under LD_PRELOAD=liblowtide.so");
  const char* cache = std::getenv("LOWTIDE_CACHE");
  CHECK(cache != nullptr && std::strcmp(cache, "0") == 0, "map_count: run it with LOWTIDE_CACHE=0");
  const std::size_t c = lt::cutoff();
  const std::size_t size = c > 256 * KiB ? c : 256 * KiB;
  constexpr int kBlocks = 400;
  std::vector<void*> held(kBlocks, nullptr);
  std::vector<void*> grown(16, nullptr);
  const std::size_t start = vmas();

  for (auto& p : held) {
    p = malloc(opaque(size));
    CHECK(p != nullptr);
    std::memset(p, 0xA5, size);
  }
  const std::size_t v_held = vmas() - start;
  for (int i = 1; i < kBlocks; i += 2) {
    free(held[static_cast<std::size_t>(i)]);
    held[static_cast<std::size_t>(i)] = nullptr;
  }
  const std::size_t v_holes = vmas() - start;

  // Buffers grown by realloc (moved with mremap, or grown in place), every
  // other one advised for huge pages by the program once it is done.
  std::vector<std::size_t> len(grown.size(), 64 * KiB);
  for (auto& p : grown) p = malloc(opaque(std::size_t{64} * KiB));
  for (int step = 0; step < 22; ++step)
    for (std::size_t i = 0; i < grown.size(); ++i) {
      len[i] = len[i] * 5 / 4;
      void* q = realloc(grown[i], opaque(len[i]));
      CHECK(q != nullptr, "realloc to %zu: %s", len[i], std::strerror(errno));
      grown[i] = q;
      std::memset(static_cast<char*>(q) + len[i] / 2, 0x5A, len[i] - len[i] / 2);
    }
  for (std::size_t i = 0; i < grown.size(); i += 2) {
    // The block's whole pages only: madvise needs a page-aligned start.
    auto lo = (reinterpret_cast<std::uintptr_t>(grown[i]) + 4095) & ~std::uintptr_t{4095};
    auto hi = (reinterpret_cast<std::uintptr_t>(grown[i]) + len[i]) & ~std::uintptr_t{4095};
    CHECK(madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE) == 0 || errno == EINVAL,
          "madvise(MADV_HUGEPAGE): %s", std::strerror(errno));
  }
  const std::size_t v_grown = vmas() - start;

  for (auto& p : held) free(p);
  for (auto& p : grown) free(p);
  const std::size_t v_freed = vmas() - start;
  std::printf("map_count: %d blocks of %zu KiB held: +%zu VMAs; every other freed: +%zu; %zu buffers grown by "
              "realloc to %zu KiB, half advised: +%zu; all freed: +%zu\n",
              kBlocks, size / KiB, v_held, v_holes, grown.size(), len[0] / KiB, v_grown, v_freed);
  CHECK(v_held <= kSlack, "%d blocks committed one after another made %zu mappings, not one", kBlocks, v_held);
  CHECK(v_holes <= 2 * (kBlocks / 2) + kSlack, "%d frees between live blocks made %zu mappings (at most 2 each)",
        kBlocks / 2, v_holes);
  CHECK(v_freed <= kSlack, "every block freed, yet %zu mappings more than at the start remain", v_freed);
  // Each grown buffer is one mapping (it moves and grows as one: pal::move_grow)
  // with the free space between it and the next, plus the two edges the
  // program's own madvise cuts into every other one. A move into a tail
  // committed first left one mapping more per move: 215 here.
  const std::size_t advised = (grown.size() + 1) / 2;
  CHECK(v_grown <= 3 * grown.size() + 2 * advised + kSlack,
        "%zu buffers grown by realloc (%zu advised) made %zu mappings, more than 3 each", grown.size(), advised,
        v_grown);

  // The range those blocks were written in, committed again: calloc reads zeros.
  std::vector<void*> again;
  for (int i = 0; i < kBlocks / 4; ++i) {
    void* p = calloc(1, opaque(size));
    CHECK(p != nullptr);
    CHECK(all_zero(p, size), "calloc(%zu) #%d over a recommitted extent is not zero", size, i);
    again.push_back(p);
  }
  for (std::size_t i = 0; i < 4; ++i) {
    void* p = calloc(opaque(len[i]), 1);
    CHECK(p != nullptr);
    CHECK(all_zero(p, len[i]), "calloc(%zu) over a range realloc'd blocks used is not zero", len[i]);
    again.push_back(p);
  }
  for (void* p : again) free(p);
  std::printf("PASS map_count\n");
  return 0;
}
