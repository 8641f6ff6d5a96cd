// 1,000 short-lived threads, in batches of 20. Each thread allocates small and
// large blocks (malloc, calloc, new, aligned), frees some of them itself and
// hands the rest to the main thread, which verifies and frees them after the
// thread has exited (frees into the heap/arena of a dead thread).

#include "lowtide_test.hpp"

#include <mutex>
#include <thread>
#include <vector>

#include <malloc.h>

using lt::KiB;
using lt::opaque;

namespace {

struct Block {
  void* p;
  std::size_t n;
  unsigned seed;
  int kind;  // 0 malloc/calloc/realloc -> free, 1 operator new -> delete, 2 aligned -> free
};

std::mutex g_mu;
std::vector<Block> g_leftovers;

void thread_body(unsigned id) {
  const std::size_t c = lt::cutoff();
  const std::size_t sizes[] = {1, 24, 300, 4 * KiB, 70 * KiB, c - 1, c, 2 * c + 1};
  std::vector<Block> mine;
  for (std::size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    const std::size_t n = sizes[i];
    const unsigned seed = id * 16 + static_cast<unsigned>(i);
    void* p = nullptr;
    int kind = static_cast<int>((id + i) % 3);
    if (kind == 0) {
      p = (i & 1) ? calloc(opaque(n), 1) : malloc(opaque(n));
    } else if (kind == 1) {
      p = ::operator new(opaque(n));
    } else {
      CHECK(posix_memalign(&p, opaque(std::size_t{4096}), n) == 0);
      CHECK(lt::aligned_to(p, 4096));
    }
    CHECK(p != nullptr, "thread %u: allocation of %zu failed", id, n);
    lt::fill_pattern(p, n, seed, 4096);
    mine.push_back({p, n, seed, kind});
  }
  // grow one small block across the cutoff and keep it
  void* r = malloc(opaque(std::size_t{100}));
  CHECK(r != nullptr);
  lt::fill_pattern(r, 100, id);
  r = realloc(r, opaque(2 * c));
  CHECK(r != nullptr && lt::find_pattern_mismatch(r, 100, id) == SIZE_MAX, "thread %u: realloc lost data", id);
  lt::fill_pattern(r, 2 * c, id, 4096);
  mine.push_back({r, 2 * c, id, 0});

  // Free every other block here, hand over the rest.
  std::vector<Block> handover;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    Block& b = mine[i];
    CHECK(lt::find_pattern_mismatch(b.p, b.n, b.seed, 4096) == SIZE_MAX, "thread %u: block corrupted", id);
    if ((i + id) % 2 == 0) {
      if (b.kind == 1)
        ::operator delete(b.p, b.n);
      else
        free(b.p);
    } else {
      handover.push_back(b);
    }
  }
  std::lock_guard<std::mutex> lk(g_mu);
  g_leftovers.insert(g_leftovers.end(), handover.begin(), handover.end());
}

}  // namespace

int main() {
  lt::arm_watchdog(150, "threads");
  constexpr unsigned kThreads = 1000;
  constexpr unsigned kBatch = 20;  // ~6 MiB touched per thread
  std::size_t freed_by_main = 0;
  for (unsigned base = 0; base < kThreads; base += kBatch) {
    std::vector<std::thread> batch;
    for (unsigned t = base; t < base + kBatch; ++t) batch.emplace_back(thread_body, t);
    for (auto& t : batch) t.join();
    // All threads of the batch are gone: free what they left behind.
    std::vector<Block> left;
    {
      std::lock_guard<std::mutex> lk(g_mu);
      left.swap(g_leftovers);
    }
    for (const Block& b : left) {
      CHECK(lt::find_pattern_mismatch(b.p, b.n, b.seed, 4096) == SIZE_MAX,
            "block %p (%zu bytes) left by an exited thread is corrupted", b.p, b.n);
      if (b.kind == 1)
        ::operator delete(b.p);
      else
        free(b.p);
      ++freed_by_main;
    }
  }
  CHECK(freed_by_main >= kThreads * 4, "main thread freed only %zu leftover blocks", freed_by_main);
  // The allocator is still usable afterwards.
  void* p = malloc(opaque(3 * lt::cutoff()));
  CHECK(p != nullptr);
  free(p);
  const int tr = malloc_trim(0);
  CHECK(tr == 0 || tr == 1, "malloc_trim returned %d", tr);
  std::printf("threads: %u threads, main freed %zu leftover blocks\nPASS threads\n", kThreads, freed_by_main);
  return 0;
}
