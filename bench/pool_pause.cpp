// pool-pause: what giving back exited threads' pages costs a pool that
// comes back. Rounds of 2 threads that each build 8,000 blocks of 1000 B
// (8 MiB), write them, free them and exit; a pause between rounds. The
// time is the rounds' work (thread start to join), pauses excluded: an
// allocator that keeps the threads' pages serves the next round from them,
// one that gives them back during the pause (glibc at each free, lowtide's
// decay thread 100-800 ms after the last exit: docs/benchmarks.md,
// "Exited threads' pages at once") faults them in again.
//
// usage: pool_pause [--pause-ms N] [--rounds R]   (defaults 150, 12)
// Prints one JSON line: wall_s (the work), rounds, pause_ms.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "bench_util.hpp"

int main(int argc, char** argv) {
  const long pause_ms = bench::opt(argc, argv, "--pause-ms", 150);
  const long rounds = bench::opt(argc, argv, "--rounds", 12);
  double work = 0;
  for (long round = 0; round < rounds; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < 2; ++t)
      ts.emplace_back([] {
        std::vector<void*> v(8000);
        for (auto& p : v) {
          p = std::malloc(1000);
          if (p == nullptr) std::abort();
          std::memset(p, 1, 1000);
        }
        for (auto* p : v) std::free(p);
      });
    for (auto& t : ts) t.join();
    work += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  std::printf("{\"workload\": \"pool-pause\", \"wall_s\": %.5f, \"rounds\": %ld, \"pause_ms\": %ld}\n", work, rounds,
              pause_ms);
  return 0;
}
