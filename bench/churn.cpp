// churn: malloc/free churn of 16 B - 4 KiB objects over a fixed working set.
// Each thread owns kSlots live objects; every op frees a random slot and
// refills it with a new object of a random size (log-uniform 16 B - 4 KiB,
// fixed seed), touching its first and last byte. Threads do not share
// objects (see larson.cpp for cross-thread frees).
//
// usage: churn [--threads N] [--scale X]   (scale: BENCH_SCALE, default 1)
// Prints one JSON line: wall_s, ops_per_s, RSS fields (bench_util.hpp).
#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"

namespace {

constexpr int kSlots = 10'000;          // live objects per thread
constexpr long kOpsPerThread = 10'000'000;  // at scale 1


void worker(int id, long ops) {
  bench::Rng rng(0x5eed0000u + static_cast<unsigned>(id) * 7919u);
  std::vector<void*> slot(kSlots, nullptr);
  bench::start_line();
  for (long i = 0; i < ops; ++i) {
    std::uint32_t k = rng.below(kSlots);
    std::free(slot[k]);
    std::size_t n = bench::rand_size(rng);
    void* p = std::malloc(n);
    if (!p) std::abort();
    bench::touch(p, n);
    slot[k] = p;
  }
  for (void* p : slot) std::free(p);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = static_cast<int>(bench::opt(argc, argv, "--threads", 1));
  const long ops = std::lround(static_cast<double>(kOpsPerThread) * bench::scale(argc, argv));
  const long rss_before = bench::read_status().rss;

  const double wall = bench::run_threads(threads, [&](int t) { worker(t, ops); });

  const double total = static_cast<double>(ops) * threads;
  char extra[256];
  std::snprintf(extra, sizeof extra,
                "\"threads\": %d, \"slots_per_thread\": %d, \"ops\": %.0f, \"ops_per_s\": %.0f",
                threads, kSlots, total, total / wall);
  bench::finish(threads == 1 ? "churn-1t" : "churn-2t", rss_before, wall, extra);
  return 0;
}
