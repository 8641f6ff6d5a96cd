// What huge pages cost in RSS for large blocks that are not fully touched:
// allocate `--blocks` blocks of `--size` MiB (or `--size-kib` KiB), from
// malloc or with `--calloc 1` from calloc, and write one byte in every
// `--stride`-th 4 KiB page (stride 1 = every page), then print the RSS the
// blocks added, next to the bytes actually written to. Run it under lowtide
// with each LOWTIDE_HUGEPAGES, and under glibc, and compare.
//
// usage: sparse_touch [--blocks N] [--size MiB | --size-kib KiB] [--stride K] [--calloc 1]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_util.hpp"

int main(int argc, char** argv) {
  const long blocks = bench::opt(argc, argv, "--blocks", 32);
  const long size_mib = bench::opt(argc, argv, "--size", 8);
  const long stride = bench::opt(argc, argv, "--stride", 16);
  const long size_kib = bench::opt(argc, argv, "--size-kib", size_mib * 1024);
  const bool zeroed = bench::opt(argc, argv, "--calloc", 0) != 0;
  const std::size_t size = static_cast<std::size_t>(size_kib) << 10;
  const long before = bench::read_status().rss;
  std::vector<volatile unsigned char*> keep;
  std::size_t pages = 0;
  for (long b = 0; b < blocks; ++b) {
    auto* p = static_cast<volatile unsigned char*>(zeroed ? std::calloc(1, size) : std::malloc(size));
    if (p == nullptr) return 1;
    for (std::size_t off = 0; off < size; off += 4096 * static_cast<std::size_t>(stride), ++pages) p[off] = 1;
    keep.push_back(p);
  }
  const long after = bench::read_status().rss;
  std::printf("{\"allocator\": \"%s\", \"call\": \"%s\", \"blocks\": %ld, \"size_kib\": %ld, \"stride\": %ld, "
              "\"touched_pages_mib\": %.1f, \"rss_added_mib\": %.1f}\n",
              bench::allocator().c_str(), zeroed ? "calloc" : "malloc", blocks, size_kib, stride, pages * 4096.0 / 1048576.0,
              (after - before) / 1048576.0);
  for (auto* p : keep) std::free(const_cast<unsigned char*>(p));
  return 0;
}
