// The thread cache's raised caps (small_path.hpp, cache_grow) seen through
// the small_thread_cached gauge. A bin starts at its base cap
// (LOWTIDE_THREAD_CACHE bytes of the class, at most 64 blocks; a class
// larger than that is not cached); each overflow doubles it, up to four
// times the base (at most 64 blocks), while all threads' raises together
// stay within 256 times LOWTIDE_THREAD_CACHE bytes (the pool). So:
//   1. one thread freeing 64 of its own ~3 KiB blocks keeps the grown cap's
//      worth of them, not the base's;
//   2. threads freeing 64 blocks of every class each keep every class's
//      grown cap while the pool has room, and all together at most their
//      base caps plus the pool (which binds with 6 threads);
//   3. with the pool used up, a thread takes back its own raise from a bin
//      it has emptied (its ~3 KiB class, grown before the others came) to
//      grow another (its 1 KiB class, which needs just that much), but not
//      from a bin in use: its ~3 KiB class overflowing then stays at its
//      base, and the 1 KiB bin keeps all 64 blocks for the next mallocs;
//   4. once they exit the pool is free again: a new thread grows as in 1.
// The threads free only their own blocks (nothing goes onto the shelves)
// while the main thread waits without allocating, so the gauge moves by
// exactly what they keep. Run with the default and with
// LOWTIDE_THREAD_CACHE=4096 (plain bytes here), where every bound binds
// sooner.
#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "../lowtide_stats.hpp"
#include "../lowtide_test.hpp"

namespace {

constexpr int kThreads = 6;
constexpr std::size_t kBlocks = 64;  // the most a bin holds (documented)
constexpr std::size_t kRequest = 3000;

std::size_t per_class = 16 << 10;
std::vector<std::size_t> classes;  // every small class up to 8 KiB, by usable size

std::size_t base_cap(std::size_t c) { return per_class / c < kBlocks ? per_class / c : kBlocks; }
std::size_t max_cap(std::size_t c) {
  if (base_cap(c) == 0) return 0;  // not cached
  return 4 * per_class / c < kBlocks ? 4 * per_class / c : kBlocks;
}

std::uint64_t cached() { return lt::read_stats().small_thread_cached; }

using release_fn = std::size_t (*)();
release_fn release_cache() {
  auto f = reinterpret_cast<release_fn>(dlsym(RTLD_DEFAULT, "lowtide_release"));
  CHECK(f != nullptr);
  return f;
}

// A thread caches from its 256th free on: 300 frees of 16-byte blocks, then
// its cache emptied (its caps back to their base).
void warm_up() {
  for (int i = 0; i < 300; ++i) free(lt::opaque(malloc(lt::opaque(std::size_t{16}))));
  release_cache()();
}

std::atomic<int> go{0}, done{0}, leave{0};

void wait_until(std::atomic<int>& v, int at_least) {
  const double deadline = lt::now_seconds() + 20;
  while (v.load() < at_least) {
    CHECK(lt::now_seconds() < deadline, "a stage was not reached");
    usleep(100);
  }
}

// Phase 1 and 3: 64 blocks of one class made and freed; then it waits.
void* one_class(void*) {
  warm_up();
  done.fetch_add(1);
  wait_until(go, 1);
  void* b[kBlocks];
  for (auto& q : b) CHECK((q = malloc(lt::opaque(kRequest))) != nullptr);
  for (auto* q : b) free(lt::opaque(q));
  done.fetch_add(1);
  wait_until(leave, 1);
  return nullptr;
}

// Phase 2: thread i (1-based) waits for go >= i, makes 64 blocks of every
// class, frees them all, counts itself done and waits to leave.
void* every_class(void* arg) {
  const int i = static_cast<int>(reinterpret_cast<std::intptr_t>(arg));
  warm_up();
  done.fetch_add(1);
  wait_until(go, i);
  std::vector<void*> b;
  b.reserve(classes.size() * kBlocks);
  for (std::size_t c : classes)
    for (std::size_t k = 0; k < kBlocks; ++k) {
      void* q = malloc(lt::opaque(c));
      CHECK(q != nullptr);
      b.push_back(q);
    }
  for (void* q : b) free(lt::opaque(q));
  // (The vector's own buffer is freed at return, after `leave`: it is not
  // counted while the main thread reads the gauge.)
  done.fetch_add(1);
  wait_until(leave, 1);
  return nullptr;
}

// Phase 3's thread: grows its ~3 KiB bin (64 blocks freed), takes every
// block back out of it (kept live, so the bin is empty), and waits; when
// told, frees 64 blocks of 1 KiB, and waits; then frees its live ~3 KiB
// blocks and mallocs 64 blocks of 1 KiB, and waits again.
std::size_t c3 = 0;  // kRequest's class
std::atomic<int> p_go{0}, p_done{0};
void* taker(void*) {
  warm_up();
  void* b[kBlocks];
  for (auto& q : b) CHECK((q = malloc(lt::opaque(kRequest))) != nullptr);
  for (auto* q : b) free(lt::opaque(q));
  void* live[kBlocks] = {};
  for (std::size_t k = 0; k < max_cap(c3); ++k) CHECK((live[k] = malloc(lt::opaque(kRequest))) != nullptr);
  p_done.store(1);
  wait_until(p_go, 1);
  for (auto& q : b) CHECK((q = malloc(lt::opaque(std::size_t{1024}))) != nullptr);
  for (auto* q : b) free(lt::opaque(q));
  p_done.store(2);
  wait_until(p_go, 2);
  for (auto* q : live)
    if (q != nullptr) free(lt::opaque(q));
  for (auto& q : b) CHECK((q = malloc(lt::opaque(std::size_t{1024}))) != nullptr);
  p_done.store(3);
  wait_until(p_go, 3);
  for (auto* q : b) free(lt::opaque(q));
  return nullptr;
}

void phase_one_class(const char* what) {
  go = 0;
  done = 0;
  leave = 0;
  pthread_t t;
  CHECK(pthread_create(&t, nullptr, one_class, nullptr) == 0);
  wait_until(done, 1);
  const std::uint64_t before = cached();
  go = 1;
  wait_until(done, 2);
  const std::uint64_t kept = cached() - before;
  void* probe = malloc(lt::opaque(kRequest));
  const std::size_t c = malloc_usable_size(probe);
  free(lt::opaque(probe));
  // (The main thread's probe: made and freed after the reading.)
  const std::uint64_t want = max_cap(c) * c;
  CHECK(kept == want, "%s: a thread freeing %zu of its %zu-byte blocks kept %llu bytes, expected %llu (%zu blocks: its grown cap; base cap %zu)",
        what, kBlocks, c, static_cast<unsigned long long>(kept), static_cast<unsigned long long>(want), max_cap(c), base_cap(c));
  leave = 1;
  CHECK(pthread_join(t, nullptr) == 0);
}

}  // namespace

int main() {
  if (const char* env = std::getenv("LOWTIDE_THREAD_CACHE")) per_class = std::strtoull(env, nullptr, 10);
  CHECK(per_class > 0 && per_class <= (64 << 10), "this test needs the cache on (LOWTIDE_THREAD_CACHE in plain bytes)");
  warm_up();
  for (std::size_t r = 16; r <= 8192; r += 16) {
    void* p = malloc(lt::opaque(r));
    const std::size_t c = malloc_usable_size(p);
    free(lt::opaque(p));
    if (classes.empty() || classes.back() != c) classes.push_back(c);
  }
  CHECK(classes.size() >= 20 && classes.back() == 8192, "%zu classes up to %zu", classes.size(), classes.back());
  std::uint64_t base_total = 0, max_total = 0;
  for (std::size_t c : classes) {
    base_total += base_cap(c) * c;
    max_total += max_cap(c) * c;
  }
  const std::uint64_t pool = 256 * per_class;
  // The pool must bind, or phase 2 tests nothing.
  const std::uint64_t wanted = max_total - base_total;
  CHECK(kThreads * wanted > pool, "%d threads growing every class do not reach the pool", kThreads);
  release_cache()();

  phase_one_class("first thread");
  {
    void* probe = malloc(lt::opaque(kRequest));
    c3 = malloc_usable_size(probe);
    free(lt::opaque(probe));
  }
  // Phase 3's thread grows its ~3 KiB class before the others take the
  // pool: that raise is what it can take back later, and all the 1 KiB
  // class needs.
  const std::uint64_t raise3 = (max_cap(c3) - base_cap(c3)) * c3, need1k = (max_cap(1024) - base_cap(1024)) * 1024;
  CHECK(raise3 >= need1k && need1k > 0, "the ~3 KiB raise (%llu) must cover the 1 KiB class's (%llu)",
        static_cast<unsigned long long>(raise3), static_cast<unsigned long long>(need1k));
  p_go = 0;
  p_done = 0;
  pthread_t pt;
  CHECK(pthread_create(&pt, nullptr, taker, nullptr) == 0);
  wait_until(p_done, 1);

  // Phase 2: the threads one after another, each staying alive.
  go = 0;
  done = 0;
  leave = 0;
  pthread_t t[kThreads];
  for (int i = 0; i < kThreads; ++i)
    CHECK(pthread_create(&t[i], nullptr, every_class, reinterpret_cast<void*>(static_cast<std::intptr_t>(i + 1))) == 0);
  wait_until(done, kThreads);
  const std::uint64_t start = cached();
  std::uint64_t prev = start;
  bool pool_bound = false;
  for (int i = 1; i <= kThreads; ++i) {
    go = i;
    wait_until(done, kThreads + i);
    const std::uint64_t now = cached();
    const std::uint64_t kept = now - prev, all = now - start;
    CHECK(kept <= max_total, "thread %d keeps %llu bytes, more than every class's grown cap (%llu)", i,
          static_cast<unsigned long long>(kept), static_cast<unsigned long long>(max_total));
    CHECK(kept >= base_total, "thread %d keeps %llu bytes, less than its base caps (%llu)", i,
          static_cast<unsigned long long>(kept), static_cast<unsigned long long>(base_total));
    CHECK(all <= i * base_total + pool, "%d threads keep %llu bytes, more than their base caps (%llu) and the pool (%llu)", i,
          static_cast<unsigned long long>(all), static_cast<unsigned long long>(i * base_total),
          static_cast<unsigned long long>(pool));
    // While the pool has room for a whole thread's growth, the thread
    // grows every class.
    if (all - kept <= (i - 1) * base_total + pool - wanted)
      CHECK(kept == max_total, "thread %d keeps %llu bytes, expected every class grown: %llu", i,
            static_cast<unsigned long long>(kept), static_cast<unsigned long long>(max_total));
    if (kept < max_total) pool_bound = true;
    std::printf("thread %d keeps %llu bytes (base caps %llu, grown %llu); all %llu (pool %llu)\n", i,
                static_cast<unsigned long long>(kept), static_cast<unsigned long long>(base_total),
                static_cast<unsigned long long>(max_total), static_cast<unsigned long long>(all),
                static_cast<unsigned long long>(pool));
    prev = now;
  }
  CHECK(pool_bound, "the pool never held a thread back");

  // Phase 3: the pool used up (what is left is less than any one step of
  // the last thread's that failed: at most 32 KiB by default, 8 KiB with
  // 4096, short of the 1 KiB class's whole growth), phase 3's thread grows
  // its 1 KiB bin all the way with the raise of its emptied ~3 KiB bin.
  {
    const std::uint64_t before = cached();
    p_go = 1;
    wait_until(p_done, 2);
    const std::uint64_t kept = cached() - before, want = max_cap(1024) * 1024;
    CHECK(kept == want, "with the pool used up, a thread freeing 64 blocks of 1 KiB kept %llu bytes, expected %llu (its raise taken from its emptied ~3 KiB bin)",
          static_cast<unsigned long long>(kept), static_cast<unsigned long long>(want));
    // Its ~3 KiB bin overflows with the pool still used up: the only raise
    // it could take is the 1 KiB bin's, which is full (in use), so the
    // ~3 KiB bin keeps its base cap; then its 64 mallocs of 1 KiB all come
    // from that bin. (Taking the busy raise would trim the 1 KiB bin to its
    // base and grow the ~3 KiB one: the gauge then moves by -1 KiB.)
    const std::uint64_t before3 = cached();
    p_go = 2;
    wait_until(p_done, 3);
    const std::int64_t moved = static_cast<std::int64_t>(cached()) - static_cast<std::int64_t>(before3);
    const std::int64_t expect = static_cast<std::int64_t>(base_cap(c3) * c3) - static_cast<std::int64_t>(max_cap(1024) * 1024);
    CHECK(moved == expect, "freeing %zu blocks of ~3 KiB, then 64 mallocs of 1 KiB, moved the gauge by %lld bytes, expected %lld (the busy 1 KiB bin keeps its raise)",
          max_cap(c3), static_cast<long long>(moved), static_cast<long long>(expect));
    p_go = 3;
    CHECK(pthread_join(pt, nullptr) == 0);
  }
  leave = 1;
  for (auto& th : t) CHECK(pthread_join(th, nullptr) == 0);

  // Phase 4: their exits gave the pool back.
  phase_one_class("a thread after the others' exit");
  release_cache()();
  std::printf("ok: %zu classes, base caps %llu bytes a thread, grown at most %llu\n", classes.size(),
              static_cast<unsigned long long>(base_total), static_cast<unsigned long long>(max_total));
  return 0;
}
