// 10,000 short-lived threads, at most 16 alive at a time. Each one frees up
// to 6 blocks that earlier (by then usually exited) threads left in a shared
// pool, allocates 8 of its own (small, near the cutoff, large; malloc,
// operator new, calloc, realloc across the cutoff), frees some itself and
// leaves the rest in the pool for later threads. lowtide's per-thread
// counter slots are recycled under this load (far more exited threads than
// the 256 it keeps rows for).
// A fixed amount of work (the watchdog bounds it); at the end the pool is
// emptied and the live-byte counters must be back at their start values.

#include "stress_common.hpp"

#include <mutex>
#include <pthread.h>
#include <vector>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

constexpr int kThreads = 10000;
constexpr int kAlive = 16;

struct Left {
  lt::Block b;
  bool is_new;
  int by;
};

std::mutex g_mu;
std::vector<Left> g_pool;
std::atomic<long> g_freed_from_others{0}, g_allocated{0};

void* body(void* arg) {
  const int id = static_cast<int>(reinterpret_cast<std::intptr_t>(arg));
  const std::size_t c = lt::cutoff();
  std::vector<Left> take;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    for (int i = 0; i < 6 && !g_pool.empty(); ++i) {
      take.push_back(g_pool.back());
      g_pool.pop_back();
    }
  }
  for (Left& l : take) {
    lt::verify(l.b, "block left by another thread");
    if (l.is_new) ::operator delete(l.b.p);
    else free(l.b.p);
    if (l.by != id) g_freed_from_others.fetch_add(1, std::memory_order_relaxed);
  }
  const std::size_t sizes[] = {24, 700, 5 * KiB, c - 16, c, 2 * c + 100, 40 * KiB, MiB + 7};
  std::vector<Left> mine;
  for (std::size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    const std::size_t n = sizes[(i + static_cast<std::size_t>(id)) % 8];
    Left l{{nullptr, n, 0}, false, id};
    switch ((id + static_cast<int>(i)) % 4) {
      case 0: l.b.p = malloc(opaque(n)); break;
      case 1: l.b.p = ::operator new(opaque(n)); l.is_new = true; break;
      case 2: l.b.p = calloc(1, opaque(n)); break;
      default: {
        // grow from small across the cutoff (or shrink back below it)
        void* p = malloc(opaque(std::size_t{64}));
        CHECK(p != nullptr);
        std::memset(p, 0xA7, 64);
        l.b.p = realloc(p, opaque(n));
        CHECK(l.b.p != nullptr && static_cast<unsigned char*>(l.b.p)[63] == 0xA7, "realloc 64 -> %zu lost data", n);
      }
    }
    CHECK(l.b.p != nullptr, "thread %d: allocation of %zu failed", id, n);
    lt::scribble(l.b.p, n, static_cast<std::uint64_t>(id) * 8 + i);
    l.b.sum = lt::checksum(l.b.p, n);
    mine.push_back(l);
    g_allocated.fetch_add(1, std::memory_order_relaxed);
  }
  std::lock_guard<std::mutex> lk(g_mu);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    if (i % 3 == 0) {
      lt::verify(mine[i].b, "own block");
      if (mine[i].is_new) ::operator delete(mine[i].b.p);
      else free(mine[i].b.p);
    } else {
      g_pool.push_back(mine[i]);
    }
  }
  return nullptr;
}

}  // namespace

int main() {
  lt::arm_watchdog(100, "thread_churn");
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * KiB);
  // Warm glibc's stack cache (it keeps exited threads' stacks and their
  // calloc'ed TLS vectors) so the end can be compared with the start.
  lt::Block big = lt::make_block(3 * lt::cutoff(), 1);  // lowtide's lazily made pieces (the decay thread)
  lt::drop(big, "warm");
  pthread_t warm[kAlive];
  for (int round = 0; round < 2; ++round) {
    for (auto& t : warm) CHECK(pthread_create(&t, &attr, [](void*) -> void* { return nullptr; }, nullptr) == 0);
    for (auto& t : warm) pthread_join(t, nullptr);
  }
  g_pool.reserve(kThreads * 8);
  const lt::Live start = lt::start_counting("thread_churn");
  const double t0 = lt::now_seconds();

  pthread_t ring[kAlive];
  int started = 0;
  for (; started < kThreads; ++started) {
    pthread_t& slot = ring[started % kAlive];
    if (started >= kAlive) CHECK(pthread_join(slot, nullptr) == 0);
    const int rc = pthread_create(&slot, &attr, body, reinterpret_cast<void*>(static_cast<std::intptr_t>(started)));
    CHECK(rc == 0, "pthread_create #%d: %s", started, std::strerror(rc));
  }
  for (int i = started > kAlive ? started - kAlive : 0; i < started; ++i) pthread_join(ring[i % kAlive], nullptr);
  pthread_attr_destroy(&attr);

  const std::size_t left = g_pool.size();
  for (Left& l : g_pool) {
    lt::verify(l.b, "block left by an exited thread");
    if (l.is_new) ::operator delete(l.b.p);
    else free(l.b.p);
  }
  g_pool.clear();
  const lowtide_stats s = lt::read_stats();
  std::printf("thread_churn: %d threads in %.1f s, %ld blocks allocated, %ld freed by a thread other than their "
              "allocator, %zu freed by main at the end; lowtide saw %" PRIu64 " threads in its registry\n",
              started, lt::now_seconds() - t0, g_allocated.load(), g_freed_from_others.load(), left, s.threads);
  CHECK(g_freed_from_others.load() > kThreads, "too few cross-thread frees: %ld", g_freed_from_others.load());
  lt::check_balanced(start, "thread_churn");
  std::printf("PASS thread_churn\n");
  return 0;
}
