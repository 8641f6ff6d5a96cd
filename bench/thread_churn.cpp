// thread-churn: the cost of a thread's start and exit to the allocator.
// Rounds of 10 threads, created together and joined together; each thread
// makes one small allocation (its first, so the allocator sets up whatever
// it keeps per thread), touches it, frees it and exits. Nothing else runs,
// so the wall time is thread creation and exit plus whatever the allocator
// adds to a thread's first call and to its exit (per-thread heaps, records
// of exited threads).
//
// usage: thread_churn [--threads N] [--scale X]
//   N: threads in all at scale 1 (default 10,000; rounded down to whole rounds)
// Prints one JSON line: wall_s, threads_per_s, RSS fields (bench_util.hpp).
#include <pthread.h>

#include <chrono>
#include <cmath>
#include <string>

#include "bench_util.hpp"

namespace {

constexpr int kPerRound = 10;

void* body(void* arg) {
  const auto n = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(arg));
  void* p = std::malloc(n);
  if (!p) std::abort();
  bench::touch(p, n);
  std::free(p);
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  const long want = std::lround(static_cast<double>(bench::opt(argc, argv, "--threads", 10'000)) *
                                bench::scale(argc, argv));
  const long rounds = want / kPerRound > 0 ? want / kPerRound : 1;
  const long rss_before = bench::read_status().rss;

  const auto t0 = std::chrono::steady_clock::now();
  for (long r = 0; r < rounds; ++r) {
    pthread_t t[kPerRound];
    for (int i = 0; i < kPerRound; ++i) {
      // 16..160 bytes, so the threads do not all hit one size class.
      auto n = static_cast<std::uintptr_t>(16 * (1 + (r + i) % 10));
      if (pthread_create(&t[i], nullptr, body, reinterpret_cast<void*>(n)) != 0) std::abort();
    }
    for (pthread_t& x : t) pthread_join(x, nullptr);
  }
  const double wall = bench::since(t0);

  const double threads = static_cast<double>(rounds) * kPerRound;
  char extra[256];
  std::snprintf(extra, sizeof extra, "\"threads\": %.0f, \"per_round\": %d, \"threads_per_s\": %.0f", threads,
                kPerRound, threads / wall);
  bench::finish("thread-churn", rss_before, wall, extra);
  return 0;
}
