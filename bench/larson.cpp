// larson: cross-thread producer/consumer small-object churn, after Larson &
// Krishnan's server benchmark. Each of the 2 threads keeps kSlots live
// objects; every op replaces a random slot with a new object (log-uniform
// 16 B - 4 KiB, fixed seed, first/last byte touched) and puts the old one in
// an outgoing batch. Full batches (kBatch objects) go through a small
// mutex-protected ring to the *other* thread, which frees them: every object
// that dies in the loop is freed by a thread other than the one that
// allocated it. A producer whose peer's ring is full drains its own inbox
// while it waits, so neither side can run ahead unboundedly.
//
// usage: larson [--threads N] [--scale X]   (scale: BENCH_SCALE, default 1)
// Prints one JSON line: wall_s, ops_per_s, RSS fields (bench_util.hpp).
#include <array>
#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bench_util.hpp"

namespace {

constexpr int kSlots = 4'000;              // live objects per thread
constexpr int kBatch = 256;                // objects per handed-over batch
constexpr int kRing = 16;                  // batches an inbox can hold
constexpr long kOpsTotal = 3'000'000;      // at scale 1, all threads together

using Batch = std::array<void*, kBatch>;

struct Inbox {
  std::mutex mu;
  std::array<Batch, kRing> ring;
  int head = 0, count = 0;
  std::atomic<bool> producer_done{false};

  bool try_push(const Batch& b) {
    std::lock_guard<std::mutex> g(mu);
    if (count == kRing) return false;
    ring[(head + count) % kRing] = b;
    ++count;
    return true;
  }
  bool try_pop(Batch& out) {
    std::lock_guard<std::mutex> g(mu);
    if (count == 0) return false;
    out = ring[head];
    head = (head + 1) % kRing;
    --count;
    return true;
  }
};

std::vector<std::unique_ptr<Inbox>> g_inbox;

long drain(Inbox& in) {
  Batch b;
  long n = 0;
  while (in.try_pop(b)) {
    for (void* p : b) std::free(p);
    ++n;
  }
  return n;
}

void worker(int id, int nthreads, long ops) {
  Inbox& mine = *g_inbox[static_cast<std::size_t>(id)];
  Inbox& peer = *g_inbox[static_cast<std::size_t>((id + 1) % nthreads)];
  bench::Rng rng(0x1a75000u + static_cast<unsigned>(id) * 104729u);
  std::vector<void*> slot(kSlots, nullptr);
  for (auto& s : slot) {
    std::size_t n = bench::rand_size(rng);
    s = std::malloc(n);
    bench::touch(s, n);
  }
  Batch out;
  int nout = 0;
  auto send = [&] {
    while (!peer.try_push(out)) {
      drain(mine);
      std::this_thread::yield();
    }
    nout = 0;
  };
  bench::start_line();

  for (long i = 0; i < ops; ++i) {
    std::uint32_t k = rng.below(kSlots);
    out[static_cast<std::size_t>(nout++)] = slot[k];
    std::size_t n = bench::rand_size(rng);
    void* p = std::malloc(n);
    if (!p) std::abort();
    bench::touch(p, n);
    slot[k] = p;
    if (nout == kBatch) {
      send();
      drain(mine);
    }
  }
  // Hand the rest of the live objects over too, so the peer frees them.
  for (auto& s : slot) {
    out[static_cast<std::size_t>(nout++)] = s;
    if (nout == kBatch) send();
  }
  for (int j = nout; j < kBatch; ++j) out[static_cast<std::size_t>(j)] = nullptr;
  if (nout) send();
  peer.producer_done.store(true, std::memory_order_release);
  // Keep freeing what the other thread sends until it is done and drained.
  for (;;) {
    bool done = mine.producer_done.load(std::memory_order_acquire);
    if (drain(mine) == 0 && done) break;
    if (!done) std::this_thread::yield();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = static_cast<int>(bench::opt(argc, argv, "--threads", 2));
  const long ops = std::lround(static_cast<double>(kOpsTotal) * bench::scale(argc, argv) / threads);
  const long rss_before = bench::read_status().rss;
  for (int t = 0; t < threads; ++t) g_inbox.push_back(std::make_unique<Inbox>());

  const double wall = bench::run_threads(threads, [&](int t) { worker(t, threads, ops); });

  const double total = static_cast<double>(ops) * threads;
  char extra[256];
  std::snprintf(extra, sizeof extra,
                "\"threads\": %d, \"slots_per_thread\": %d, \"batch\": %d, \"ops\": %.0f, "
                "\"ops_per_s\": %.0f",
                threads, kSlots, kBatch, total, total / wall);
  bench::finish(threads == 2 ? "larson-2t" : "larson", rss_before, wall, extra);
  return 0;
}
