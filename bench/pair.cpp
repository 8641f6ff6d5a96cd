// pair: ns per malloc+free pair of 16 B - 1 KiB, on one thread or across two.
// Sizes come from a table of 4,096 drawn once (log-uniform 16 B - 1 KiB,
// fixed seed), so the loop spends nothing on a random generator; blocks are
// not written (the pair's cost is the allocator's calls alone, as in
// bench/malloc_free.cpp, which scripts/bench-counters uses).
//
// --threads 1: free the block allocated 64 pairs earlier, malloc a new one
//   (a ring of 64 live blocks, so it is not one slot reused forever).
//   ns_per_pair = wall time / pairs.
// --threads 2: both threads run the same loop, but every block goes to the
//   other thread in batches of 64 (lock-free ring, xqueue.hpp), which frees
//   it: each thread mallocs one block and frees one of the other's per pair.
//   A thread whose outgoing ring is full frees its own inbox while it waits,
//   so neither can run ahead. ns_per_pair = wall time x 2 / pairs in all:
//   one thread's time per pair, both running at once. The scheduler places
//   the threads; --pin 1 pins them to two CPUs (bench_util.hpp's pin_to_cpu).
//
// usage: pair [--threads 1|2] [--pin 0|1] [--scale X]   (scale: BENCH_SCALE, default 1)
//   scale 1 = 40M pairs on one thread, 8M per thread on two
// Prints one JSON line: wall_s, ns_per_pair, pairs_per_s (pairs per second in
// all), cpu_s (user + system CPU of the process over the loop), RSS fields
// (bench_util.hpp).
#include <cmath>
#include <memory>
#include <vector>

#include "bench_util.hpp"
#include "xqueue.hpp"

namespace {

constexpr long kPairs1 = 40'000'000;  // at scale 1, one thread
constexpr long kPairs2 = 8'000'000;   // at scale 1, per thread with two
constexpr int kSizes = 4096;
constexpr int kLive = 64;

std::size_t g_size[kSizes];
bench::XRing* g_inbox[2];

void fill_sizes() {
  bench::Rng rng(0x9a125eedu);
  for (auto& s : g_size) s = bench::rand_size_1k(rng);
}

double one_thread(long pairs) {
  void* ring[kLive] = {};
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) {
    const auto slot = static_cast<std::size_t>(i & (kLive - 1));
    std::free(ring[slot]);
    void* volatile p = std::malloc(g_size[i & (kSizes - 1)]);
    if (!p) std::abort();
    ring[slot] = p;
  }
  const double wall = bench::since(t0);
  for (void* p : ring) std::free(p);
  return wall;
}

void cross(int id, long pairs) {
  bench::XRing& mine = *g_inbox[id];
  bench::XRing& peer = *g_inbox[1 - id];
  auto free_one = [](void* p) { std::free(p); };
  bench::start_line();
  bench::XBatch* b = nullptr;
  long i = 0;
  // Offset the two threads' walks through the size table.
  const long off = id * (kSizes / 2);
  for (; i < pairs; ++i) {
    if (b == nullptr) {
      for (int spins = 0; (b = peer.tail_slot()) == nullptr;)
        if (bench::drain(mine, free_one) == 0) bench::backoff(spins);
      b->n = 0;
    }
    void* p = std::malloc(g_size[(i + off) & (kSizes - 1)]);
    if (!p) std::abort();
    b->p[b->n++] = p;
    if (b->n == bench::kXBatch) {
      peer.publish();
      b = nullptr;
      // One batch in, one batch out: free what the other thread sent.
      if (bench::XBatch* in = mine.head_slot()) {
        for (int k = 0; k < in->n; ++k) std::free(in->p[k]);
        mine.release();
      }
    }
  }
  if (b != nullptr) peer.publish();
  peer.producer_done.store(true, std::memory_order_release);
  for (int spins = 0;;) {
    const bool done = mine.producer_done.load(std::memory_order_acquire);
    if (bench::drain(mine, free_one) > 0)
      spins = 0;
    else if (done)
      break;
    else
      bench::backoff(spins);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = static_cast<int>(bench::opt(argc, argv, "--threads", 1));
  if (threads != 1 && threads != 2) return 2;
  const double sc = bench::scale(argc, argv);
  const long per_thread = std::lround(static_cast<double>(threads == 1 ? kPairs1 : kPairs2) * sc);
  fill_sizes();
  const long rss_before = bench::read_status().rss;

  const bool want_pin = bench::opt(argc, argv, "--pin", 0) != 0;
  std::atomic<int> pinned{0};
  double wall;
  const double cpu0 = bench::cpu_seconds();
  if (threads == 1) {
    wall = one_thread(per_thread);
  } else {
    auto a = std::make_unique<bench::XRing>(), b = std::make_unique<bench::XRing>();
    g_inbox[0] = a.get();
    g_inbox[1] = b.get();
    wall = bench::run_threads(2, [&](int t) {
      if (want_pin && bench::pin_to_cpu(t)) pinned.fetch_add(1);
      cross(t, per_thread);
    });
  }

  const double cpu = bench::cpu_seconds() - cpu0;
  const double total = static_cast<double>(per_thread) * threads;
  char extra[320];
  std::snprintf(extra, sizeof extra,
                "\"threads\": %d, \"pairs\": %.0f, \"ns_per_pair\": %.3f, \"pairs_per_s\": %.0f, \"cpu_s\": %.4f, "
                "\"pinned\": %d",
                threads, total, wall * 1e9 * threads / total, total / wall, cpu, pinned.load());
  bench::finish(threads == 1 ? "pair-1t" : "pair-xthread", rss_before, wall, extra);
  return 0;
}
