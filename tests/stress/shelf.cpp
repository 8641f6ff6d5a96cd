// The thread cache's shelves (small_path.hpp) under load: two
// producer/consumer pairs pass small blocks (48, 256 and 3000 bytes) through
// a queue, each block checksummed by the producer and checked by the
// consumer before its free, while a third thread calls malloc_trim (which
// gives the shelves back) every millisecond. A consumer frees only blocks
// of another thread's pages, so its full bins go onto the shelves and the
// producers' mallocs take them back: a bin shelved twice, a block handed out
// while still queued or a list cut wrong shows as a corrupted block (or a
// crash). Then, with no trimmer, one more thread frees 200 of the main
// thread's blocks: before its exit its cache and the shelves hold blocks,
// and its exit gives back both (mimalloc's collect at a thread's exit,
// small::on_forced_collect). Then lowtide's live-byte counters balance.
//
// Under LOWTIDE_THREAD_CACHE=0 (meson test shelf_off) nothing is shelved.

#include "stress_common.hpp"

#include <malloc.h>

#include <mutex>
#include <thread>

using lt::opaque;

namespace {

constexpr int kPairs = 2;
constexpr long kBlocksPerPair = 400'000;
constexpr double kSeconds = 40;
constexpr std::size_t kRing = 4096;
constexpr std::size_t kSizes[] = {48, 256, 3000};

struct Queue {
  std::mutex mu;
  lt::Block ring[kRing];
  std::size_t head = 0, tail = 0;  // tail - head blocks queued
  bool done = false;
};

Queue g_queues[kPairs];
std::atomic<bool> g_stop{false};
std::atomic<long> g_checked{0};

void producer(Queue& q, int pair, const lt::Deadline& dl) {
  for (long i = 0; i < kBlocksPerPair && !dl.passed(); ++i) {
    lt::Block b = lt::make_block(kSizes[i % 3] - static_cast<std::size_t>(i % 7), (static_cast<std::uint64_t>(pair) << 40) + static_cast<std::uint64_t>(i));
    for (;;) {
      std::lock_guard<std::mutex> g(q.mu);
      if (q.tail - q.head < kRing) {
        q.ring[q.tail++ % kRing] = b;
        break;
      }
    }
  }
  std::lock_guard<std::mutex> g(q.mu);
  q.done = true;
}

void consumer(Queue& q) {
  for (;;) {
    lt::Block batch[64];
    std::size_t n = 0;
    bool done = false;
    {
      std::lock_guard<std::mutex> g(q.mu);
      while (n < 64 && q.head != q.tail) batch[n++] = q.ring[q.head++ % kRing];
      done = q.done && q.head == q.tail;
    }
    for (std::size_t i = 0; i < n; ++i) lt::drop(batch[i], "consumer");
    g_checked.fetch_add(static_cast<long>(n), std::memory_order_relaxed);
    if (done) return;
    if (n == 0) std::this_thread::yield();
  }
}

}  // namespace

int main() {
  alarm(120);
  using release_fn = std::size_t (*)();
  auto release = reinterpret_cast<release_fn>(dlsym(RTLD_DEFAULT, "lowtide_release"));
  CHECK(release != nullptr, "lowtide_release not found (not running under lowtide?)");
  lt::warm_thread_cache(2 * kPairs + 1);
  release();
  const lt::Live before = lt::start_counting("shelf");
  const lt::Deadline dl(kSeconds);
  std::vector<std::thread> ts;
  ts.reserve(2 * kPairs + 1);
  for (int p = 0; p < kPairs; ++p) {
    ts.emplace_back(producer, std::ref(g_queues[p]), p, std::cref(dl));
    ts.emplace_back(consumer, std::ref(g_queues[p]));
  }
  ts.emplace_back([] {
    while (!g_stop.load()) {
      malloc_trim(0);
      usleep(1000);
    }
  });
  for (int i = 0; i < 2 * kPairs; ++i) ts[static_cast<std::size_t>(i)].join();
  g_stop.store(true);
  ts.back().join();
  CHECK(g_checked.load() > 10'000, "too few blocks passed: %ld", g_checked.load());
  release();
  lt::Block mine[200];
  for (std::size_t i = 0; i < 200; ++i) mine[i] = lt::make_block(3000, i);
  std::uint64_t shelved = 0;
  std::thread([&] {
    for (int i = 0; i < 300; ++i) free(opaque(malloc(opaque(std::size_t{16}))));  // warm: it caches from its 256th free
    for (auto& b : mine) lt::drop(b, "last consumer");
    shelved = lt::read_stats().small_thread_cached;
  }).join();
  const std::uint64_t left = lt::read_stats().small_thread_cached;
  std::printf("shelf: %ld blocks checked, %llu bytes cached and shelved before the last consumer's exit, %llu after\n",
              g_checked.load(), static_cast<unsigned long long>(shelved), static_cast<unsigned long long>(left));
  const char* env = std::getenv("LOWTIDE_THREAD_CACHE");
  if (env != nullptr && std::strcmp(env, "0") == 0)
    CHECK(shelved == 0, "nothing is shelved with the cache off: %llu", static_cast<unsigned long long>(shelved));
  else
    CHECK(shelved > 200 * 3000 / 2, "the last consumer's bins went onto the shelves: %llu bytes cached",
          static_cast<unsigned long long>(shelved));
  CHECK(left == 0, "the last consumer's exit gave back its cache and the shelves: %llu bytes left",
        static_cast<unsigned long long>(left));
  lt::check_balanced(before, "shelf");
  return 0;
}
