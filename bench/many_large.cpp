// many_large: many large blocks live at once (the malloc-large shape):
// N blocks of 5-25 MiB (uniform, byte sizes, fixed seed) are allocated, then
// a loop replaces a random one R times (free it, malloc a new size), then
// all are freed. About 15 MiB x N of address space is live throughout
// (3 GiB at the default 200).
//
// Every block gets one byte written in every `--stride`-th 4 KiB page
// (default 64: one byte per 256 KiB, 1/64 of its pages), plus its last
// byte. Why a fraction: a 4 KiB first-touch fault costs 2-16 us on this VM
// (scripts/bench's page-fault probe: 16 us on 2026-12-02, 2.3 us on
// 2026-12-03), so writing every page of a 15 MiB block would cost 9-60 ms
// of kernel time per fresh block, the same under
// every allocator that gives memory back, and drown what this workload is
// for: the allocator's large path (its mmap/munmap calls, how it reuses a
// freed block for the next size, its headers). One byte per 256 KiB still
// makes each block real memory: a block carved from memory the allocator
// kept faults nothing, one from memory it gave back faults 20-100 pages, so
// retention still shows in the time, and peak RSS stays ~1/64 of the live
// bytes (~50 MiB) on a VM shared with other jobs. --stride 1 writes every
// page.
//
// usage: many_large [--blocks N] [--stride K] [--scale X]
//   scale 1 = 4,000 replacements (BENCH_SCALE, default 1)
// Prints one JSON line: wall_s (fill + replacements + final frees),
// ns_per_replace, RSS fields (bench_util.hpp; peak_rss is VmHWM).
#include <cmath>
#include <vector>

#include "bench_util.hpp"

namespace {

constexpr long kReplaceTotal = 4'000;  // at scale 1
constexpr std::size_t kMin = 5u << 20, kMax = 25u << 20;

std::size_t pages_touched = 0;

void* fresh(bench::Rng& r, std::size_t stride_bytes) {
  const std::size_t n = kMin + r.below(static_cast<std::uint32_t>(kMax - kMin + 1));
  auto* p = static_cast<volatile unsigned char*>(std::malloc(n));
  if (!p) std::abort();
  for (std::size_t off = 0; off < n; off += stride_bytes, ++pages_touched) p[off] = 1;
  p[n - 1] = 1;
  return const_cast<unsigned char*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  const long blocks = bench::opt(argc, argv, "--blocks", 200);
  const long stride = bench::opt(argc, argv, "--stride", 64);
  if (blocks < 1 || stride < 1) return 2;
  const long replace = std::lround(static_cast<double>(kReplaceTotal) * bench::scale(argc, argv));
  const std::size_t stride_bytes = 4096 * static_cast<std::size_t>(stride);
  const long rss_before = bench::read_status().rss;
  bench::Rng rng(0x1a46e000u);
  std::vector<void*> live(static_cast<std::size_t>(blocks), nullptr);

  const auto t0 = std::chrono::steady_clock::now();
  for (auto& p : live) p = fresh(rng, stride_bytes);
  const double fill_s = bench::since(t0);
  for (long i = 0; i < replace; ++i) {
    void*& slot = live[rng.below(static_cast<std::uint32_t>(blocks))];
    std::free(slot);
    slot = fresh(rng, stride_bytes);
  }
  const double loop_s = bench::since(t0) - fill_s;
  const long peak_live_rss = bench::read_status().rss;
  for (void*& p : live) {
    std::free(p);
    p = nullptr;
  }
  const double wall = bench::since(t0);

  char extra[320];
  std::snprintf(extra, sizeof extra,
                "\"blocks\": %ld, \"replacements\": %ld, \"stride_pages\": %ld, \"pages_touched\": %zu, "
                "\"fill_s\": %.4f, \"loop_s\": %.4f, \"ns_per_replace\": %.0f, \"rss_live\": %ld",
                blocks, replace, stride, pages_touched, fill_s, loop_s,
                replace > 0 ? loop_s * 1e9 / static_cast<double>(replace) : 0.0, peak_live_rss);
  bench::finish("many-large", rss_before, wall, extra);
  return 0;
}
