// Threads building buffers at once, the seed workload's shape in C++: four
// threads each grow buffers by realloc in steps of an eighth (as CPython's
// bytearray does), from one 64 KiB append to 1-5 MiB, write each step's new
// bytes, keep the last few buffers and free the older ones, so that the
// reuse cache is drawn from by several threads at once: a growing block
// takes a cached extent and grows into the rest behind it (kept for its
// thread), other threads take elsewhere or cut their need off that rest's
// back, blocks that cannot grow in place move, and misses take a smaller
// cached block's warm pages. One buffer in eight is asked 2 MiB-aligned
// (posix_memalign, then realloc'ed, which keeps no alignment) and one in
// eight starts as a calloc above the cutoff, whose pages, reused from the
// cache or not, must read as zero. Every buffer's
// checksum is checked after each growth step (the kept prefix) and before
// it is freed. The large path's invariant checks run after every large
// call in the invariants build (scripts/test runs this suite there too).
// Written for the rest owners (docs/design-notes.md "Reuse without
// retention"). Ends with lowtide's live bytes back at their start and with
// the paths above seen in its counters. tests/stress/meson.build sets the
// variables those paths depend on (the cache's size, the cutoff, the decay
// thread, no memory limit), so a caller's environment cannot turn them off.

#include "stress_common.hpp"

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

constexpr int kThreads = 4;
constexpr int kBuffersPerThread = 60;
constexpr int kKept = 6;  // buffers a thread keeps alive
constexpr double kSeconds = 60;

using lt::Rng;

std::atomic<long> g_steps{0}, g_buffers{0}, g_aligned{0}, g_calloc{0};

// A buffer's bytes are written step by step (each step's new bytes with
// their own seed), so the checksum of the whole is kept as the checksum of
// its covered offsets, recomputed over the whole block after each step.
lt::Block grow_buffer(Rng& r, const lt::Deadline& deadline) {
  const std::size_t target = MiB + r.below(4 * MiB);
  std::size_t n = 64 * KiB;
  void* p = nullptr;
  const std::size_t kind = r.below(8);
  if (kind == 1) n = 2 * lt::cutoff();  // a large block, possibly a cached one's pages
  if (kind == 0) {
    CHECK(posix_memalign(&p, 2 * MiB, n) == 0 && p != nullptr, "posix_memalign(2 MiB, %zu) failed", n);
    CHECK(lt::aligned_to(p, 2 * MiB), "posix_memalign(2 MiB) gave %p", p);
    g_aligned.fetch_add(1, std::memory_order_relaxed);
  } else if (kind == 1) {
    p = calloc(1, opaque(n));
    CHECK(p != nullptr, "calloc(%zu) failed", n);
    CHECK(lt::covered_zero(p, n), "calloc(%zu) gave a block that does not read as zero", n);
    g_calloc.fetch_add(1, std::memory_order_relaxed);
  } else {
    p = malloc(opaque(n));
    CHECK(p != nullptr, "malloc(%zu) failed", n);
  }
  lt::scribble(p, n, r.next());
  std::uint64_t sum = lt::checksum(p, n);
  while (n < target && !deadline.passed()) {
    std::size_t next = n + n / 8 + 64 * KiB;
    if (next > target) next = target;
    void* q = realloc(p, opaque(next));
    CHECK(q != nullptr, "realloc %zu -> %zu failed: %s", n, next, std::strerror(errno));
    CHECK(lt::checksum(q, n) == sum, "realloc %zu -> %zu lost data (%p -> %p)", n, next, p, q);
    // The new bytes, as an append writes them: every offset of them the
    // checksum reads (so it never reads a byte nobody wrote), and one byte
    // in each 4 KiB page.
    auto* b = static_cast<unsigned char*>(q);
    auto put = [&](std::size_t i) { b[i] = static_cast<unsigned char>(r.next()); };
    lt::for_each_covered(next, [&](std::size_t i) {
      if (i >= n) put(i);
    });
    for (std::size_t i = n; i < next; i += 4 * KiB) put(i);
    p = q;
    n = next;
    sum = lt::checksum(p, n);
    g_steps.fetch_add(1, std::memory_order_relaxed);
  }
  g_buffers.fetch_add(1, std::memory_order_relaxed);
  return lt::Block{p, n, sum};
}

void worker(int id, const lt::Deadline* deadline) {
  Rng r{0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(id + 1)};
  lt::Block kept[kKept];
  for (int i = 0; i < kBuffersPerThread && !deadline->passed(); ++i) {
    lt::Block& slot = kept[r.below(kKept)];
    if (slot.p != nullptr) lt::drop(slot, "a kept buffer");
    slot = grow_buffer(r, *deadline);
    lt::verify(slot, "a buffer just built");
  }
  for (lt::Block& b : kept)
    if (b.p != nullptr) lt::drop(b, "a kept buffer at the end");
}

}  // namespace

int main() {
  lt::arm_watchdog(150, "growing_buffers");  // (meson's timeout is 180 s)
  CHECK(lt::under_lowtide(), "growing_buffers must run with liblowtide.so preloaded");
  lt::Block warm = lt::make_block(3 * lt::cutoff(), 1);  // lowtide's lazily made pieces (the decay thread)
  lt::drop(warm, "warm");
  lt::warm_thread_cache(kThreads);
  const lowtide_stats before = lt::read_stats();
  const lt::Live start = lt::start_counting("growing_buffers");
  const lt::Deadline deadline(kSeconds);
  const double t0 = lt::now_seconds();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t, &deadline);
  for (auto& t : threads) t.join();
  const double secs = lt::now_seconds() - t0;
  const lowtide_stats after = lt::read_stats();
  const auto d = [&](std::uint64_t lowtide_stats::*f) { return static_cast<long>(after.*f - before.*f); };
  std::printf("growing_buffers: %d threads, %ld buffers (%ld aligned, %ld calloc), %ld growth steps in %.1f s; "
              "large path: %ld reused from the cache, %ld grown into a cached block, %ld grown in place, "
              "%ld moved by mremap, %ld by copying, %ld warm misses\n",
              kThreads, g_buffers.load(), g_aligned.load(), g_calloc.load(), g_steps.load(), secs,
              d(&lowtide_stats::large_reused), d(&lowtide_stats::large_grown_into_cache),
              d(&lowtide_stats::large_in_place), d(&lowtide_stats::large_remaps), d(&lowtide_stats::large_copies),
              d(&lowtide_stats::large_warm_misses));
  CHECK(g_buffers.load() >= kThreads * 8, "only %ld buffers built before the deadline", g_buffers.load());
  CHECK(g_aligned.load() > 0 && g_calloc.load() > 0, "no aligned or no calloc buffer was built");
  // The paths this test is for did run (else it tests nothing).
  CHECK(d(&lowtide_stats::large_reused) > 0, "no allocation was served from the reuse cache");
  CHECK(d(&lowtide_stats::large_grown_into_cache) > 0, "no buffer grew into a cached block");
  CHECK(d(&lowtide_stats::large_remaps) + d(&lowtide_stats::large_copies) > 0, "no buffer moved");
  lt::check_balanced(start, "growing_buffers");
  std::printf("PASS growing_buffers\n");
  return 0;
}
