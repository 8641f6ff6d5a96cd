// offheap: issue 14's JVM off-heap shape in C++. Four threads each build
// their share of `--mib` MiB (default 1024 at scale 1) of direct buffers of
// 1-4 MiB (uniform, byte sizes, fixed seed per thread), writing every byte
// as a JVM zeroes a ByteBuffer.allocateDirect and a service then fills it,
// hold them until every thread is done, then each frees its own. Two rounds
// (a service handling one batch after another: the second can reuse what the
// first freed); the RSS samples are taken after the second round's frees,
// when the process goes quiet.
//
// Issue 14's target is on what the process holds 0.3 s after the free
// (<= 32 MiB above the baseline); the JSON's rss_after_200ms (0.2 s after)
// is the stricter sample.
//
// usage: offheap [--threads N] [--mib M] [--rounds R] [--scale X]
//   scale 1 = 1024 MiB a round in all (BENCH_SCALE, default 1)
// Prints one JSON line: wall_s (both rounds), blocks (per round), RSS fields
// (bench_util.hpp).
#include <barrier>
#include <cmath>
#include <cstring>
#include <vector>

#include "bench_util.hpp"

int main(int argc, char** argv) {
  const long threads = bench::opt(argc, argv, "--threads", 4);
  const long rounds = bench::opt(argc, argv, "--rounds", 2);
  const double mib = static_cast<double>(bench::opt(argc, argv, "--mib", 1024)) * bench::scale(argc, argv);
  if (threads < 1 || rounds < 1 || mib <= 0) return 2;
  const std::size_t share = static_cast<std::size_t>(mib * 1048576.0 / static_cast<double>(threads));
  constexpr std::size_t kMin = 1u << 20, kMax = 4u << 20;
  const long rss_before = bench::read_status().rss;
  std::atomic<long> blocks{0};
  std::barrier sync(threads);

  const double wall = bench::run_threads(static_cast<int>(threads), [&](int t) {
    bench::start_line();
    bench::Rng rng(0x0ffea900u + static_cast<unsigned>(t));
    std::vector<void*> mine;
    for (long r = 0; r < rounds; ++r) {
      std::size_t built = 0;
      while (built < share) {
        const std::size_t n = kMin + rng.below(static_cast<std::uint32_t>(kMax - kMin + 1));
        void* p = std::malloc(n);
        if (p == nullptr) std::abort();
        std::memset(p, static_cast<int>(r + 1), n);
        mine.push_back(p);
        built += n;
      }
      if (t == 0) blocks.store(0);
      sync.arrive_and_wait();  // every buffer of the round is live
      blocks.fetch_add(static_cast<long>(mine.size()));
      for (void* p : mine) std::free(p);
      mine.clear();
      sync.arrive_and_wait();  // every buffer of the round is freed
    }
  });
  char extra[96];
  std::snprintf(extra, sizeof extra, "\"threads\": %ld, \"blocks\": %ld, \"mib\": %.0f", threads, blocks.load(), mib);
  bench::finish("offheap", rss_before, wall, extra);
  return 0;
}
