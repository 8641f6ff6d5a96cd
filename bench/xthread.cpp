// xthread: cross-thread frees in a producer/consumer pipeline (the shape of
// xmalloc-test: messages built on one thread and retired on another).
// Each of P pairs has a producer thread that mallocs blocks of 16 B - 1 KiB
// (log-uniform, fixed seed), writes their first and last byte, and hands
// them in batches of 64 through a lock-free single-producer single-consumer
// ring (xqueue.hpp) to its consumer thread, which reads each block's first
// byte and frees it. Every block is freed by a thread other than the one
// that allocated it; the producer never frees, the consumer never mallocs.
// A full ring (4,096 blocks in flight) makes the producer wait, so the
// pipeline runs at the speed of its slower side.
//
// The scheduler places the threads; --pin 1 pins thread i to the i-th
// allowed CPU (bench_util.hpp's pin_to_cpu says when that helps and when it
// hurts). "pinned" in the output counts the threads that were.
//
// usage: xthread [--pairs P] [--pin 0|1] [--scale X]   (scale: BENCH_SCALE, default 1)
//   scale 1 = 10M blocks in all (split over the pairs)
// Prints one JSON line: wall_s, ops_per_s (blocks malloc'ed and freed per
// second), ns_per_pair (wall time / blocks: the pipeline's time per
// malloc+free pair, both sides running at once), cpu_s (user + system CPU
// of the process over the same span, start-up included), RSS fields
// (bench_util.hpp).
#include <cmath>
#include <memory>
#include <vector>

#include "bench_util.hpp"
#include "xqueue.hpp"

namespace {

constexpr long kBlocksTotal = 10'000'000;  // at scale 1, all pairs together

std::vector<std::unique_ptr<bench::XRing>> g_ring;
std::atomic<unsigned> g_sink{0};

void producer(int pair, long blocks) {
  bench::XRing& r = *g_ring[static_cast<std::size_t>(pair)];
  bench::Rng rng(0x7a11000u + static_cast<unsigned>(pair) * 7919u);
  bench::start_line();
  bench::XBatch* b = nullptr;
  for (long i = 0; i < blocks; ++i) {
    if (b == nullptr) {
      int spins = 0;
      while ((b = r.tail_slot()) == nullptr) bench::backoff(spins);
      b->n = 0;
    }
    const std::size_t n = bench::rand_size_1k(rng);
    void* p = std::malloc(n);
    if (!p) std::abort();
    bench::touch(p, n);
    b->p[b->n++] = p;
    if (b->n == bench::kXBatch) {
      r.publish();
      b = nullptr;
    }
  }
  if (b != nullptr) r.publish();
  r.producer_done.store(true, std::memory_order_release);
}

void consumer(int pair) {
  bench::XRing& r = *g_ring[static_cast<std::size_t>(pair)];
  unsigned sum = 0;
  bench::start_line();
  for (int spins = 0;;) {
    // Read done before draining: a batch published before done was set is
    // then seen by this drain or the next one.
    const bool done = r.producer_done.load(std::memory_order_acquire);
    const long n = bench::drain(r, [&](void* p) {
      sum += *static_cast<volatile unsigned char*>(p);
      std::free(p);
    });
    if (n > 0) {
      spins = 0;
    } else if (done) {
      break;
    } else {
      bench::backoff(spins);
    }
  }
  g_sink.fetch_add(sum, std::memory_order_relaxed);
}

}  // namespace

int main(int argc, char** argv) {
  const int pairs = static_cast<int>(bench::opt(argc, argv, "--pairs", 1));
  if (pairs < 1) return 2;
  const long blocks = std::lround(static_cast<double>(kBlocksTotal) * bench::scale(argc, argv) / pairs);
  const long rss_before = bench::read_status().rss;
  for (int p = 0; p < pairs; ++p) g_ring.push_back(std::make_unique<bench::XRing>());

  const bool want_pin = bench::opt(argc, argv, "--pin", 0) != 0;
  std::atomic<int> pinned{0};
  const double cpu0 = bench::cpu_seconds();
  const double wall = bench::run_threads(2 * pairs, [&](int t) {
    if (want_pin && bench::pin_to_cpu(t)) pinned.fetch_add(1);
    if (t % 2 == 0)
      producer(t / 2, blocks);
    else
      consumer(t / 2);
  });

  const double cpu = bench::cpu_seconds() - cpu0;
  const double total = static_cast<double>(blocks) * pairs;
  char extra[320];
  std::snprintf(extra, sizeof extra,
                "\"pairs\": %d, \"batch\": %d, \"blocks\": %.0f, \"ops_per_s\": %.0f, \"ns_per_pair\": %.2f, "
                "\"cpu_s\": %.4f, \"pinned\": %d",
                pairs, bench::kXBatch, total, total / wall, wall * 1e9 / total, cpu, pinned.load());
  bench::finish("xthread", rss_before, wall, extra);
  return 0;
}
