// 64 threads share 2,048 slots. Each step picks a slot at random: an empty
// one gets a new block (malloc, calloc, operator new or posix_memalign, sizes
// from 1 byte to 6 MiB, a third of them near the cutoff), a full one is freed
// or realloc'ed by whichever thread drew it, so most frees and reallocs are
// cross-thread and reallocs go in every direction (small<->small,
// small<->large, large<->large both ways). Every block carries a checksum
// checked before each free and realloc. Stops after 600 steps per thread
// or at the deadline; then everything is freed and lowtide's live-byte
// counters must be back at their start values.

#include "stress_common.hpp"

#include <mutex>
#include <new>
#include <thread>
#include <vector>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

constexpr int kThreads = 64;
constexpr int kSlots = 2048;
constexpr long kStepsPerThread = 600;
constexpr double kSeconds = 25;

enum Kind : int { kMalloc, kCalloc, kNew, kAligned };

struct Slot {
  std::mutex mu;
  lt::Block b;
  Kind kind = kMalloc;
  int owner = -1;  // the thread that allocated or last realloc'ed it
};

Slot g_slots[kSlots];
// realloc directions seen, indexed [old is large][new is large][grew]
std::atomic<long> g_dirs[2][2][2];
std::atomic<long> g_steps{0}, g_allocs{0}, g_frees{0}, g_reallocs{0}, g_cross{0};
std::size_t g_cutoff;

using lt::Rng;

std::size_t pick_size(Rng& r) {
  const std::size_t c = g_cutoff;
  switch (r.below(20)) {
    case 0: case 1: case 2: case 3: case 4: return 1 + r.below(256);
    case 5: case 6: case 7: case 8: case 9: return 256 + r.below(16 * KiB);
    case 10: case 11: return 16 * KiB + r.below(c - 16 * KiB);
    case 12: case 13: case 14: return c - 64 + r.below(128);            // at the cutoff
    case 15: case 16: return c / 2 - 64 + r.below(c * 2);                  // both sides of it
    case 17: case 18: return 2 * c + r.below(MiB);
    default: return MiB + r.below(5 * MiB);
  }
}

void release(Slot& s, const char* where) {
  lt::verify(s.b, where);
  if (s.kind == kNew) ::operator delete(s.b.p);
  else free(s.b.p);
  s.b = lt::Block{};
}

void worker(int id) {
  Rng r{0x1234567ull + static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ull};
  const lt::Deadline deadline(kSeconds);
  for (long step = 0; step < kStepsPerThread && !deadline.passed(); ++step) {
    Slot& s = g_slots[r.below(kSlots)];
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.b.p == nullptr) {
      const std::size_t n = pick_size(r);
      void* p = nullptr;
      s.kind = static_cast<Kind>(r.below(4));
      switch (s.kind) {
        case kMalloc: p = malloc(opaque(n)); break;
        case kCalloc:
          p = calloc(opaque(n), 1);
          CHECK(p != nullptr && lt::covered_zero(p, n), "calloc(%zu) memory not zero", n);
          break;
        case kNew: p = ::operator new(opaque(n)); break;
        case kAligned: {
          const std::size_t align = std::size_t{16} << r.below(13);  // 16 B .. 64 KiB
          CHECK(posix_memalign(&p, align, opaque(n)) == 0, "posix_memalign(%zu, %zu)", align, n);
          CHECK(lt::aligned_to(p, align), "posix_memalign(%zu) misaligned: %p", align, p);
          break;
        }
      }
      CHECK(p != nullptr, "allocation of %zu failed", n);
      lt::scribble(p, n, r.next());
      s.b = {p, n, lt::checksum(p, n)};
      s.owner = id;
      g_allocs.fetch_add(1, std::memory_order_relaxed);
    } else if (s.kind == kNew || r.below(2) == 0) {
      if (s.owner != id) g_cross.fetch_add(1, std::memory_order_relaxed);
      release(s, "free");
      g_frees.fetch_add(1, std::memory_order_relaxed);
    } else {
      lt::verify(s.b, "before realloc");
      if (s.owner != id) g_cross.fetch_add(1, std::memory_order_relaxed);
      const std::size_t n = pick_size(r);
      const std::size_t keep = n < s.b.n ? n : s.b.n;
      const std::uint64_t prefix = lt::checksum(s.b.p, keep);
      void* q = realloc(s.b.p, opaque(n));
      CHECK(q != nullptr, "realloc %zu -> %zu failed", s.b.n, n);
      CHECK(lt::checksum(q, keep) == prefix, "realloc %zu -> %zu lost data", s.b.n, n);
      g_dirs[s.b.n >= g_cutoff][n >= g_cutoff][n > s.b.n].fetch_add(1, std::memory_order_relaxed);
      lt::scribble(q, n, r.next());
      s.b = {q, n, lt::checksum(q, n)};
      s.kind = kMalloc;  // realloc'ed memory is freed with free()
      s.owner = id;
      g_reallocs.fetch_add(1, std::memory_order_relaxed);
    }
    g_steps.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

int main() {
  lt::arm_watchdog(100, "cross_threads");
  g_cutoff = lt::cutoff();
  lt::Block warm = lt::make_block(3 * g_cutoff, 1);  // lowtide's lazily made pieces (the decay thread)
  lt::drop(warm, "warm");
  lt::warm_thread_cache(kThreads);
  const lt::Live start = lt::start_counting("cross_threads");
  const double t0 = lt::now_seconds();

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();

  long left = 0;
  for (Slot& s : g_slots) {
    if (s.b.p != nullptr) {
      release(s, "final free");
      ++left;
    }
  }
  const double secs = lt::now_seconds() - t0;
  const char* names[2] = {"small", "large"};
  long directions = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int grew = 0; grew < 2; ++grew) {
        const long n = g_dirs[a][b][grew].load();
        std::printf("  realloc %s -> %s, %s: %ld\n", names[a], names[b], grew ? "grow" : "shrink", n);
        // small -> large never shrinks and large -> small never grows
        if ((a == 0 && b == 1 && grew == 0) || (a == 1 && b == 0 && grew == 1)) continue;
        CHECK(n > 0, "no realloc %s -> %s (%s) happened", names[a], names[b], grew ? "grow" : "shrink");
        ++directions;
      }
  std::printf("cross_threads: %d threads, %ld steps (%ld allocations, %ld frees, %ld reallocs, %ld of those on "
              "another thread's block, %ld freed at the end) in %.1f s\n",
              kThreads, g_steps.load(), g_allocs.load(), g_frees.load(), g_reallocs.load(), g_cross.load(), left, secs);
  CHECK(g_cross.load() > 0, "no cross-thread free or realloc happened");
  CHECK(directions == 6);
  lt::check_balanced(start, "cross_threads");
  std::printf("PASS cross_threads\n");
  return 0;
}
